const mods = process.argv.slice(2);
const t0 = performance.now();
for (const m of mods) { const t = performance.now(); await import(m); console.log(m, (performance.now()-t).toFixed(1)); }
console.log('total', (performance.now()-t0).toFixed(1));
