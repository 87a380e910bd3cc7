//! The napi-rs binding: one class, `NativeEngine`, whose `call(op, payload)`
//! runs an engine operation on a worker thread and resolves a promise with a
//! JSON envelope: `{"ok": value}` or `{"err": {code, message, index}}`.
//! Conversion lives in `ops.rs`; nothing here decides anything.

mod ops;
mod pool;

use std::sync::Arc;

use braid_engine::{Engine, EngineConfig};
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// Inspects every log of a data directory (and with `salvage`, cuts corrupt
/// ones at their first damaged frame); resolves with the JSON envelope of a
/// `DoctorReport`.
#[napi(catch_unwind)]
pub fn doctor(data_dir: String, salvage: bool) -> String {
    ops::doctor(&data_dir, salvage)
}

#[napi]
pub struct NativeEngine {
    engine: Arc<Engine>,
    pool: pool::Pool,
}

#[napi]
impl NativeEngine {
    /// Opens the engine over a data directory; `config` is a JSON object
    /// (see `ops::parse_config`).
    #[napi(factory, catch_unwind)]
    pub fn open(config: String) -> Result<NativeEngine> {
        let config: EngineConfig =
            ops::parse_config(&config).map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
        let engine = Engine::open(config)
            .map_err(|e| Error::new(Status::GenericFailure, format!("{}: {}", e.code.as_str(), e.message)))?;
        Ok(NativeEngine { engine: Arc::new(engine), pool: pool::Pool::new(32) })
    }

    /// Runs `op` with a JSON payload off the JS thread; resolves with the
    /// JSON envelope. Never rejects for engine errors, and a panic inside the
    /// engine becomes an `internal_panic` error.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn call<'env>(&self, env: &'env Env, op: String, payload: String) -> Result<Object<'env>> {
        let (deferred, promise) = env.create_deferred::<String, Box<dyn FnOnce(Env) -> Result<String> + Send>>()?;
        let engine = self.engine.clone();
        self.pool.spawn(Box::new(move || {
            let out = ops::dispatch(&engine, &op, &payload);
            deferred.resolve(Box::new(move |_env| Ok(out)));
        }));
        Ok(promise)
    }

    /// The same as `call`, on the JS thread (for cheap reads such as metrics).
    #[napi(catch_unwind)]
    pub fn call_sync(&self, op: String, payload: String) -> String {
        ops::dispatch(&self.engine, &op, &payload)
    }

    /// Finishes queued writes and stops the engine's threads.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        self.engine.close();
    }
}
