import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // the napi addon must not be loaded inside worker threads
    pool: 'forks',
    // two cores: run files two at a time
    maxWorkers: 2,
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
