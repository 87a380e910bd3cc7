/**
 * What the CLI prints on stdout. Node's `console.log` drops write errors,
 * so output that never reached its file or pipe (a full disk, a closed
 * stdout, a reader that went away) had been lost with exit status 0 (found
 * by a black-box review): a failed write says so on stderr, once, and the
 * command exits 1.
 */
let failed = false;

function outputFailed(err: Error): void {
  if (failed) return;
  failed = true;
  process.exitCode = 1;
  process.stderr.write(`braid: output_failed: the output could not be written to stdout (${err.message})\n`);
}

let watching = false;

/** Prints `text` and a newline on stdout. */
export function print(text: string): void {
  if (!watching) {
    watching = true;
    process.stdout.on('error', outputFailed);
  }
  try {
    process.stdout.write(`${text}\n`, (err) => {
      if (err) outputFailed(err);
    });
  } catch (err) {
    outputFailed(err as Error);
  }
}
