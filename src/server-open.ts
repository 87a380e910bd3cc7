/**
 * How the server opens its data directory: on a thread of its own
 * (checkpoint load, WAL replay) while the caller goes on, with the indexers
 * held until the server listens. `braid serve` calls this before it loads
 * the server's code, so that the two overlap (src/cli.ts).
 */
import { Braid } from './engine.js';
import type { ServerConfig } from './config.js';

export function openServerEngine(config: ServerConfig): Braid {
  return Braid.openInBackground({
    dataDir: config.dataDir,
    maxBatch: config.maxBatch,
    maxVectorDim: config.maxVectorDim,
    maxColumns: config.maxColumns,
    receiptRetentionMs: config.receiptRetentionMs,
    receiptMemoryBytes: config.receiptMemoryBytes,
    historyEpochs: config.historyEpochs,
    checkpointBytes: config.checkpointBytes,
    checkpointRows: config.checkpointRows,
    checkpointIntervalMs: config.checkpointIntervalMs,
    // after a crash the indexers catch up on every core; they start once the
    // server listens, so that a restart is not slowed by them (docs/operations.md)
    deferIndexing: true,
  });
}
