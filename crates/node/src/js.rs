//! Reads a JavaScript value as JSON, the way `JSON.stringify` would see it,
//! without printing it: records, queries and receipts cross as objects and
//! vectors as numbers or typed arrays, never as text.
//!
//! What `JSON.stringify` does is kept where it is well defined: `undefined`,
//! functions and symbols are left out of objects and become `null` in
//! arrays, `toJSON` is called (so a `Date` is its ISO string), only own
//! enumerable string keys are read. Where it would silently change a value
//! the reader refuses instead: `NaN` and `Infinity` (which it prints as
//! `null`), a `BigInt` (which it throws on), nesting deeper than 128
//! levels (serde_json's own limit), a string holding a lone UTF-16
//! surrogate (which is not Unicode: UTF-8 would hold it as U+FFFD, so two ids
//! or tenants could become one), and an object that is not data (a `Map`,
//! `Set`, boxed primitive, `RegExp`, `Error`, invalid `Date`, or a typed
//! array other than these two). A `Float32Array` or `Float64Array` reads as
//! a list of its numbers.

use std::ffi::CStr;
use std::ptr;

use napi::sys;
use serde_json::{Map, Number, Value};

/// serde_json's recursion limit; the service's errors speak of the same.
pub const MAX_DEPTH: usize = 128;

/// Most array elements and object properties one argument may hold: as many
/// values as the largest request body the server takes (16 MiB) could,
/// since every JSON value takes at least a byte. Each is a napi call or
/// more on the JS thread, so without a bound a sparse `[]` of length
/// 2^32 - 1 (which `JSON.stringify` refuses at once) held the thread and
/// grew the process by gigabytes. The numbers of a `Float32Array` or
/// `Float64Array` are copied in one go and not counted.
pub const MAX_VALUES: usize = 16 << 20;

/// Why a value could not be read, and where (`fields.embedding[3]`).
#[derive(Debug)]
pub struct ReadError {
    pub path: String,
    pub reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NotFinite,
    BigInt,
    TooDeep,
    /// A string holds an unpaired UTF-16 surrogate.
    LoneSurrogate,
    /// A napi call failed (a throwing getter or `toJSON`, a proxy).
    Unreadable,
    /// More than [`MAX_VALUES`] values.
    TooLarge,
    /// A `__proto__` key, which a JavaScript object read back could only
    /// hold as its prototype (the HTTP API refuses it in bodies too).
    ProtoKey,
    /// An object JSON would silently turn into something else (a `Map` into
    /// `{}`, an invalid `Date` into `null`): what it is.
    NotData(&'static str),
}

impl ReadError {
    pub fn message(&self, what: &str) -> String {
        let at = match self.path.chars().next() {
            None => what.to_string(),
            Some('[') => format!("{what}{}", self.path),
            Some(_) => format!("{what}.{}", self.path),
        };
        match self.reason {
            Reason::NotFinite => format!("{at} is not a finite number (NaN and Infinity cannot be stored or searched)"),
            Reason::BigInt => format!("{at} is a BigInt, which JSON cannot hold (pass a number or a string)"),
            Reason::TooDeep => format!("the request's values nest too deeply (more than {MAX_DEPTH} levels) at {at}"),
            Reason::LoneSurrogate => {
                format!("{at} holds an unpaired UTF-16 surrogate (\\uD800-\\uDFFF), which is not Unicode text")
            }
            Reason::Unreadable => format!("{at} could not be read (a getter or toJSON threw)"),
            Reason::TooLarge => format!(
                "{at} holds more than {MAX_VALUES} values (array elements and object properties), the most a call may pass"
            ),
            Reason::ProtoKey => {
                format!("{at} is a key named __proto__, which cannot be read back as a field (rename it)")
            }
            Reason::NotData(what) => format!(
                "{at} is {what}, which JSON would silently store as something else (pass plain data: objects, arrays, strings, numbers, booleans)"
            ),
        }
    }
}

type Read<T> = Result<T, ReadError>;

/// Reads `value` as JSON. `None` when it is `undefined` (or a function or
/// symbol), which JSON has no value for.
///
/// # Safety
/// `env` and `value` must be live handles of the calling JS thread.
pub unsafe fn read(env: sys::napi_env, value: sys::napi_value) -> Read<Option<Value>> {
    let mut path = Vec::new();
    let mut budget = MAX_VALUES;
    unsafe { read_at(env, value, 0, &mut path, &mut budget) }
}

/// Reads a plain JavaScript array element by element, each as [`read`]
/// reads it inside the array (`null` for `undefined`), and hands each to
/// `each` before the next is read, so the list's values are never held all
/// at once (a batch of 5,000 records of 256-d vectors was 92 MB of them).
/// The budget and the paths of refusals are those of [`read`]. `Ok(None)`
/// when `value` is not a plain array (one with a `toJSON` included): the
/// caller reads it whole.
///
/// # Safety
/// `env` and `value` must be live handles of the calling JS thread.
pub unsafe fn read_elements<T, E>(
    env: sys::napi_env,
    value: sys::napi_value,
    mut each: impl FnMut(usize, Value) -> Result<T, E>,
) -> Read<Option<Result<Vec<T>, E>>> {
    let mut path = Vec::new();
    let mut budget = MAX_VALUES;
    let (mut is, mut replaced) = (false, false);
    ok(unsafe { sys::napi_is_array(env, value, &mut is) }, &path)?;
    if is {
        ok(unsafe { sys::napi_has_named_property(env, value, c"toJSON".as_ptr(), &mut replaced) }, &path)?;
    }
    if !is || replaced {
        return Ok(None);
    }
    let mut len = 0u32;
    ok(unsafe { sys::napi_get_array_length(env, value, &mut len) }, &path)?;
    spend(&mut budget, len as usize, &path)?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let mut element = ptr::null_mut();
        path.push(Seg::Index(i));
        ok(unsafe { sys::napi_get_element(env, value, i, &mut element) }, &path)?;
        let read = unsafe { read_at(env, element, 1, &mut path, &mut budget)? }.unwrap_or(Value::Null);
        path.pop();
        match each(i as usize, read) {
            Ok(item) => out.push(item),
            Err(e) => return Ok(Some(Err(e))),
        }
    }
    Ok(Some(Ok(out)))
}

/// Takes `n` values from what is left of the call's budget.
fn spend(budget: &mut usize, n: usize, path: &[Seg]) -> Read<()> {
    match budget.checked_sub(n) {
        Some(left) => {
            *budget = left;
            Ok(())
        }
        None => Err(fail(path, Reason::TooLarge)),
    }
}

#[derive(Clone)]
enum Seg {
    Key(String),
    Index(u32),
}

fn fail(path: &[Seg], reason: Reason) -> ReadError {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    ReadError { path: out, reason }
}

fn ok(status: sys::napi_status, path: &[Seg]) -> Read<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(fail(path, Reason::Unreadable))
    }
}

unsafe fn read_at(
    env: sys::napi_env,
    value: sys::napi_value,
    depth: usize,
    path: &mut Vec<Seg>,
    budget: &mut usize,
) -> Read<Option<Value>> {
    let mut ty = 0;
    ok(unsafe { sys::napi_typeof(env, value, &mut ty) }, path)?;
    Ok(Some(match ty {
        sys::ValueType::napi_undefined | sys::ValueType::napi_function | sys::ValueType::napi_symbol => {
            return Ok(None)
        }
        sys::ValueType::napi_null => Value::Null,
        sys::ValueType::napi_boolean => {
            let mut b = false;
            ok(unsafe { sys::napi_get_value_bool(env, value, &mut b) }, path)?;
            Value::Bool(b)
        }
        sys::ValueType::napi_number => Value::Number(unsafe { number(env, value, path)? }),
        sys::ValueType::napi_string => Value::String(unsafe { string(env, value, path)? }),
        sys::ValueType::napi_bigint => return Err(fail(path, Reason::BigInt)),
        sys::ValueType::napi_object => {
            if depth >= MAX_DEPTH {
                return Err(fail(path, Reason::TooDeep));
            }
            if let Some(what) = unsafe { not_data(env, value, path)? } {
                return Err(fail(path, Reason::NotData(what)));
            }
            if let Some(replaced) = unsafe { to_json(env, value, path)? } {
                return unsafe { read_at(env, replaced, depth, path, budget) };
            }
            let mut is = false;
            ok(unsafe { sys::napi_is_array(env, value, &mut is) }, path)?;
            if is {
                Value::Array(unsafe { array(env, value, depth, path, budget)? })
            } else {
                ok(unsafe { sys::napi_is_typedarray(env, value, &mut is) }, path)?;
                if is {
                    unsafe { typed_array(env, value, path, budget)? }
                } else {
                    Value::Object(unsafe { object(env, value, depth, path, budget)? })
                }
            }
        }
        _ => return Ok(None),
    }))
}

unsafe fn number(env: sys::napi_env, value: sys::napi_value, path: &[Seg]) -> Read<Number> {
    let mut n = 0.0;
    ok(unsafe { sys::napi_get_value_double(env, value, &mut n) }, path)?;
    finite(n, path)
}

fn finite(n: f64, path: &[Seg]) -> Read<Number> {
    // integers stay integers, as JSON.parse of their text would give
    braid_engine::wire::javascript_number(n).ok_or_else(|| fail(path, Reason::NotFinite))
}

unsafe fn string(env: sys::napi_env, value: sys::napi_value, path: &[Seg]) -> Read<String> {
    let mut len = 0;
    ok(unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut len) }, path)?;
    let mut buf = vec![0u8; len + 1];
    let mut written = 0;
    ok(unsafe { sys::napi_get_value_string_utf8(env, value, buf.as_mut_ptr().cast(), len + 1, &mut written) }, path)?;
    buf.truncate(written);
    // napi writes a lone surrogate as U+FFFD (EF BF BD): a string that has
    // one is read again as UTF-16 to tell a real U+FFFD from a rewritten one
    // (`contains` on bytes is a memchr: a string without 0xEF costs one pass)
    let replaced = buf.contains(&0xEF) && buf.windows(3).any(|w| w == [0xEF, 0xBF, 0xBD]);
    if replaced && unsafe { has_lone_surrogate(env, value, path)? } {
        return Err(fail(path, Reason::LoneSurrogate));
    }
    Ok(String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

unsafe fn has_lone_surrogate(env: sys::napi_env, value: sys::napi_value, path: &[Seg]) -> Read<bool> {
    let mut len = 0;
    ok(unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut len) }, path)?;
    let mut units = vec![0u16; len + 1];
    let mut written = 0;
    ok(unsafe { sys::napi_get_value_string_utf16(env, value, units.as_mut_ptr(), len + 1, &mut written) }, path)?;
    units.truncate(written);
    Ok(char::decode_utf16(units).any(|c| c.is_err()))
}

/// Whether property `name` of `object` is a string holding an unpaired
/// surrogate. napi-rs's typed `String` reads one as U+FFFD; a caller that
/// took a string that way and finds U+FFFD in it asks here which it was.
///
/// # Safety
/// `env` and `object` must be live handles of the calling JS thread.
pub unsafe fn property_has_lone_surrogate(env: sys::napi_env, object: sys::napi_value, name: &CStr) -> bool {
    let mut value = ptr::null_mut();
    if unsafe { sys::napi_get_named_property(env, object, name.as_ptr(), &mut value) } != sys::Status::napi_ok {
        return false;
    }
    unsafe { has_lone_surrogate(env, value, &[]) }.unwrap_or(false)
}

/// `value.toJSON()` when `value` has one, as JSON.stringify calls it.
/// What an object is when `JSON.stringify` would silently store it as
/// something else (found by a black-box review: a `Map` was stored as `{}`,
/// `new Boolean(false)` as `{}`, an `Int32Array` as an object of indexes, an
/// invalid `Date` as `null`); `None` for data: a plain object (its prototype
/// `Object.prototype` or none), an array, a valid `Date`, a `Float32Array`
/// or `Float64Array`, or an instance of a class of the caller's (read as its
/// own enumerable members, as JSON reads it). Plain objects cost two napi
/// calls; only others are compared with the built-in classes.
unsafe fn not_data(env: sys::napi_env, value: sys::napi_value, path: &[Seg]) -> Read<Option<&'static str>> {
    let mut is = false;
    ok(unsafe { sys::napi_is_date(env, value, &mut is) }, path)?;
    if is {
        let mut time = 0.0;
        ok(unsafe { sys::napi_get_date_value(env, value, &mut time) }, path)?;
        return Ok(time.is_nan().then_some("an invalid Date"));
    }
    let null_or = |proto: sys::napi_value| -> Read<bool> {
        let mut ty = 0;
        ok(unsafe { sys::napi_typeof(env, proto, &mut ty) }, path)?;
        Ok(ty == sys::ValueType::napi_null)
    };
    let mut proto = ptr::null_mut();
    ok(unsafe { sys::napi_get_prototype(env, value, &mut proto) }, path)?;
    if null_or(proto)? {
        return Ok(None);
    }
    let mut above = ptr::null_mut();
    ok(unsafe { sys::napi_get_prototype(env, proto, &mut above) }, path)?;
    if null_or(above)? {
        return Ok(None);
    }
    ok(unsafe { sys::napi_is_array(env, value, &mut is) }, path)?;
    if is {
        return Ok(None);
    }
    ok(unsafe { sys::napi_is_typedarray(env, value, &mut is) }, path)?;
    if is {
        let (mut kind, mut len) = (0, 0usize);
        let (mut data, mut buffer, mut offset) = (ptr::null_mut(), ptr::null_mut(), 0usize);
        ok(
            unsafe {
                sys::napi_get_typedarray_info(env, value, &mut kind, &mut len, &mut data, &mut buffer, &mut offset)
            },
            path,
        )?;
        let float = matches!(kind, sys::TypedarrayType::float32_array | sys::TypedarrayType::float64_array);
        return Ok((!float).then_some("a typed array other than Float32Array or Float64Array"));
    }
    // V8's own type checks, which napi has
    type Check<'a> = &'a dyn Fn(&mut bool) -> sys::napi_status;
    let napi_checks: [(Check, &str); 4] = [
        (&|is| unsafe { sys::napi_is_arraybuffer(env, value, is) }, "an ArrayBuffer"),
        (&|is| unsafe { sys::napi_is_dataview(env, value, is) }, "a DataView"),
        (&|is| unsafe { sys::napi_is_error(env, value, is) }, "an Error"),
        (&|is| unsafe { sys::napi_is_promise(env, value, is) }, "a Promise"),
    ];
    for (check, what) in napi_checks {
        ok(check(&mut is), path)?;
        if is {
            return Ok(Some(what));
        }
    }
    // Node's own type checks (util.types), which hold across realms: a Map
    // made in a `vm` context is not an instance of this realm's Map (found by
    // a recheck: it was stored as {})
    const KINDS: [(&CStr, &str); 10] = [
        (c"isMap", "a Map"),
        (c"isSet", "a Set"),
        (c"isWeakMap", "a WeakMap"),
        (c"isWeakSet", "a WeakSet"),
        (c"isRegExp", "a RegExp"),
        (c"isBooleanObject", "a Boolean object"),
        (c"isNumberObject", "a Number object"),
        (c"isStringObject", "a String object"),
        (c"isBigIntObject", "a BigInt object"),
        (c"isSymbolObject", "a Symbol object"),
    ];
    let types = unsafe { util_types(env) }.ok_or_else(|| fail(path, Reason::Unreadable))?;
    for (check, what) in KINDS {
        let mut function = ptr::null_mut();
        let mut out = ptr::null_mut();
        let called = unsafe { sys::napi_get_named_property(env, types, check.as_ptr(), &mut function) }
            == sys::Status::napi_ok
            && unsafe { sys::napi_call_function(env, types, function, 1, &value, &mut out) } == sys::Status::napi_ok
            && unsafe { sys::napi_get_value_bool(env, out, &mut is) } == sys::Status::napi_ok;
        if !called {
            // leave no pending exception behind: the caller reports the failure
            let mut exception = ptr::null_mut();
            unsafe { sys::napi_get_and_clear_last_exception(env, &mut exception) };
            return Err(fail(path, Reason::Unreadable));
        }
        if is {
            return Ok(Some(what));
        }
    }
    Ok(None)
}

/// `require('node:util').types`, through `process.getBuiltinModule` (Node
/// 20.16 and later); `None` (no exception left pending) where it fails.
unsafe fn util_types(env: sys::napi_env) -> Option<sys::napi_value> {
    let step = |status: sys::napi_status| -> Option<()> {
        if status == sys::Status::napi_ok {
            return Some(());
        }
        let mut exception = ptr::null_mut();
        unsafe { sys::napi_get_and_clear_last_exception(env, &mut exception) };
        None
    };
    let mut global = ptr::null_mut();
    step(unsafe { sys::napi_get_global(env, &mut global) })?;
    let mut process = ptr::null_mut();
    step(unsafe { sys::napi_get_named_property(env, global, c"process".as_ptr(), &mut process) })?;
    let mut load = ptr::null_mut();
    step(unsafe { sys::napi_get_named_property(env, process, c"getBuiltinModule".as_ptr(), &mut load) })?;
    let mut name = ptr::null_mut();
    step(unsafe { sys::napi_create_string_utf8(env, c"node:util".as_ptr(), 9, &mut name) })?;
    let mut util = ptr::null_mut();
    step(unsafe { sys::napi_call_function(env, process, load, 1, &name, &mut util) })?;
    let mut types = ptr::null_mut();
    step(unsafe { sys::napi_get_named_property(env, util, c"types".as_ptr(), &mut types) })?;
    Some(types)
}

unsafe fn to_json(env: sys::napi_env, value: sys::napi_value, path: &[Seg]) -> Read<Option<sys::napi_value>> {
    let mut has = false;
    ok(unsafe { sys::napi_has_named_property(env, value, c"toJSON".as_ptr(), &mut has) }, path)?;
    if !has {
        return Ok(None);
    }
    let mut method = ptr::null_mut();
    ok(unsafe { sys::napi_get_named_property(env, value, c"toJSON".as_ptr(), &mut method) }, path)?;
    let mut ty = 0;
    ok(unsafe { sys::napi_typeof(env, method, &mut ty) }, path)?;
    if ty != sys::ValueType::napi_function {
        return Ok(None);
    }
    let mut out = ptr::null_mut();
    let status = unsafe { sys::napi_call_function(env, value, method, 0, ptr::null(), &mut out) };
    if status != sys::Status::napi_ok {
        // leave no pending exception behind: the caller reports the failure
        let mut exception = ptr::null_mut();
        unsafe { sys::napi_get_and_clear_last_exception(env, &mut exception) };
        return Err(fail(path, Reason::Unreadable));
    }
    Ok(Some(out))
}

unsafe fn array(
    env: sys::napi_env,
    value: sys::napi_value,
    depth: usize,
    path: &mut Vec<Seg>,
    budget: &mut usize,
) -> Read<Vec<Value>> {
    let mut len = 0u32;
    ok(unsafe { sys::napi_get_array_length(env, value, &mut len) }, path)?;
    // before reading any: a sparse array's length costs nothing to make
    spend(budget, len as usize, path)?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let mut element = ptr::null_mut();
        path.push(Seg::Index(i));
        ok(unsafe { sys::napi_get_element(env, value, i, &mut element) }, path)?;
        out.push(unsafe { read_at(env, element, depth + 1, path, budget)? }.unwrap_or(Value::Null));
        path.pop();
    }
    Ok(out)
}

unsafe fn object(
    env: sys::napi_env,
    value: sys::napi_value,
    depth: usize,
    path: &mut Vec<Seg>,
    budget: &mut usize,
) -> Read<Map<String, Value>> {
    let mut keys = ptr::null_mut();
    ok(
        unsafe {
            sys::napi_get_all_property_names(
                env,
                value,
                sys::KeyCollectionMode::own_only,
                sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
                sys::KeyConversion::numbers_to_strings,
                &mut keys,
            )
        },
        path,
    )?;
    let mut len = 0u32;
    ok(unsafe { sys::napi_get_array_length(env, keys, &mut len) }, path)?;
    spend(budget, len as usize, path)?;
    let mut out = Map::new();
    for i in 0..len {
        let mut key = ptr::null_mut();
        ok(unsafe { sys::napi_get_element(env, keys, i, &mut key) }, path)?;
        let name = unsafe { string(env, key, path)? };
        let mut element = ptr::null_mut();
        path.push(Seg::Key(name));
        if matches!(path.last(), Some(Seg::Key(k)) if k == "__proto__") {
            return Err(fail(path, Reason::ProtoKey));
        }
        ok(unsafe { sys::napi_get_property(env, value, key, &mut element) }, path)?;
        let read = unsafe { read_at(env, element, depth + 1, path, budget)? };
        let Some(Seg::Key(name)) = path.pop() else { unreachable!("pushed a key") };
        if let Some(v) = read {
            out.insert(name, v);
        }
    }
    Ok(out)
}

/// A `Float32Array` or `Float64Array` as the list of its numbers (other
/// typed arrays are refused before, by `not_data`; were one read here, it
/// would be what JSON.stringify sees, an object of indexes).
unsafe fn typed_array(
    env: sys::napi_env,
    value: sys::napi_value,
    path: &mut Vec<Seg>,
    budget: &mut usize,
) -> Read<Value> {
    let mut kind = 0;
    let mut len = 0usize;
    let mut data = ptr::null_mut();
    let mut buffer = ptr::null_mut();
    let mut offset = 0usize;
    ok(
        unsafe { sys::napi_get_typedarray_info(env, value, &mut kind, &mut len, &mut data, &mut buffer, &mut offset) },
        path,
    )?;
    // each number as a plain one would read (integers stay integers), so a
    // Float64Array is exactly the array of numbers it holds
    let numbers = |n: usize, at: &dyn Fn(usize) -> f64| -> Read<Value> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let x = at(i);
            let Ok(number) = finite(x, path) else {
                let mut p = path.clone();
                p.push(Seg::Index(i as u32));
                return Err(fail(&p, Reason::NotFinite));
            };
            out.push(Value::Number(number));
        }
        Ok(Value::Array(out))
    };
    match kind {
        sys::TypedarrayType::float32_array if len > 0 => {
            // SAFETY: napi describes `len` f32s at `data`, alive while `value` is
            let xs = unsafe { std::slice::from_raw_parts(data as *const f32, len) };
            numbers(len, &|i| xs[i] as f64)
        }
        sys::TypedarrayType::float64_array if len > 0 => {
            // SAFETY: as above, `len` f64s
            let xs = unsafe { std::slice::from_raw_parts(data as *const f64, len) };
            numbers(len, &|i| xs[i])
        }
        sys::TypedarrayType::float32_array | sys::TypedarrayType::float64_array => Ok(Value::Array(Vec::new())),
        _ => Ok(Value::Object(unsafe { object(env, value, 0, path, budget)? })),
    }
}
