/**
 * What the CLI prints on stdout. Node's `console.log` drops write errors,
 * so output that never reached its file (a full disk, an I/O error) had been
 * lost with exit status 0 (found by a black-box review): a failed write says
 * so on stderr, once, and the command exits 1. A pipe whose reader closed it
 * (`| head -1`) is not a failure: the rest is dropped quietly.
 */
let failed = false;

function outputFailed(err: NodeJS.ErrnoException): void {
  if (failed) return;
  failed = true;
  // a reader that closed the pipe (`| head -1`) took what it wanted: no failure, as for any Unix tool
  if (err.code === 'EPIPE') return;
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
    outputFailed(err as NodeJS.ErrnoException);
  }
}
