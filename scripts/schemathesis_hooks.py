"""Custom schemathesis check for scripts/fuzz-api.sh, loaded by `hooks` in
scripts/schemathesis.toml.

positive_data_acceptance expects every request the OpenAPI document calls
valid to be accepted. A few Braid operations refuse some of them with a 400
for a reason no schema can state: a table or column that the data does not
have, a query text outside the grammar, a body branch that disagrees with the
branch header. schemathesis.toml lets 400 through positive_data_acceptance on
exactly those operations, and this check narrows it back down: such a 400 must
carry one of the codes listed for the operation
(`checks.data_dependent_refusal.codes`). Any other 400 on valid data, or one
without a code, is a failure: the document is missing a rule the server
enforces.
"""

import schemathesis


@schemathesis.check
def data_dependent_refusal(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    allowed = ctx.config.custom_kwargs.get("data_dependent_refusal", {}).get("codes", [])
    try:
        body = response.json()
    except ValueError:
        body = None
    code = body.get("code") if isinstance(body, dict) else None
    if code not in allowed:
        listed = ", ".join(allowed) if allowed else "none"
        raise AssertionError(
            f"a request the document calls valid was refused with 400 {code!r}; "
            f"the codes this operation may refuse valid data with are: {listed}"
        )
    return None
