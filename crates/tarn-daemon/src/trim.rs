//! `pool trim`, `pool checkpoint` and `pool import --rewind-to-checkpoint`
//! (the work is done by tarn-obj's trim.rs and checkpoint.rs), and their
//! part of `pool status` and `pool list`.

use tarn_obj::trim::TrimState;
use tarn_obj::{ObjError, ObjPool};

use crate::daemon::Daemon;
use crate::events::{Event, Severity};
use crate::proto::*;

type HandlerResult = Result<Response, String>;

/// The message of an object-layer error as zpool would word it (without
/// the "invalid argument:" prefix of refusals).
fn message(e: ObjError) -> String {
    match e {
        ObjError::Invalid(m) => m,
        other => other.to_string(),
    }
}

/// `pool status` data: each device's trim and the checkpoint.
pub(crate) fn status_extras(obj: &ObjPool) -> (Vec<TrimStatusData>, Option<CheckpointData>) {
    let trims = obj
        .trim_status()
        .into_iter()
        .map(|l| TrimStatusData {
            guid: l.guid,
            path: l.path.clone(),
            state: match l.state {
                TrimState::Active => "active",
                TrimState::Suspended => "suspended",
                TrimState::Canceled => "canceled",
                TrimState::Complete => "complete",
            }
            .into(),
            percent: l.percent(),
            action_time: l.action_time,
            bytes_done: l.bytes_done,
            bytes_left: if l.state == TrimState::Complete { 0 } else { l.asize.saturating_sub(l.offset) },
            rate: l.rate,
        })
        .collect();
    let checkpoint = obj.checkpoint_info().map(|c| CheckpointData { txg: c.txg, created: c.created, held_bytes: c.held_bytes });
    (trims, checkpoint)
}

/// `pool list`'s `checkpoint` (CKPOINT): bytes held, "-" without one.
pub(crate) fn checkpoint_cell(obj: &ObjPool, parsable: bool) -> PropCell {
    let value = match obj.checkpoint_info() {
        Some(c) if parsable => c.held_bytes.to_string(),
        Some(c) => tarn_ds::size::format_number(c.held_bytes),
        None => "-".into(),
    };
    PropCell { property: "checkpoint".into(), value, source: "-".into(), source_type: "NONE".into(), source_data: "-".into(), received: None }
}

impl Daemon {
    pub(crate) fn handle_trim(&self, request: Request) -> HandlerResult {
        match request {
            Request::PoolTrim { pool, devices, rate, cancel, suspend } => self.trim(&pool, &devices, rate, cancel, suspend),
            Request::PoolCheckpoint { pool, discard } => self.checkpoint(&pool, discard),
            request @ Request::PoolImportCheckpoint { .. } => {
                let Request::PoolImportCheckpoint { pool, .. } = &request else { unreachable!() };
                let pool = pool.clone();
                let response = self.pool_import(request)?;
                // Devices of top-level vdevs added after the checkpoint left.
                let name = self
                    .pools
                    .lock()
                    .iter()
                    .find(|(name, imported)| **name == pool || imported.ds.obj().guid().to_string() == pool)
                    .map(|(name, _)| name.clone());
                let warning = name.map(|name| {
                    let warning = self.remember_devices(&name);
                    self.post_event(Event::new(&name, "checkpoint_rewind", Severity::Warning, "pool rewound to its checkpoint"));
                    warning
                });
                Ok(Response { stderr: response.stderr + &warning.unwrap_or_default(), ..response })
            }
            other => Err(format!("unsupported request {other:?}")),
        }
    }

    fn trim(&self, pool: &str, devices: &[String], rate: u64, cancel: bool, suspend: bool) -> HandlerResult {
        let verb = if cancel {
            "cancel trimming"
        } else if suspend {
            "suspend trimming"
        } else {
            "trim"
        };
        let fail = |why: String| format!("cannot {verb} '{pool}': {why}");
        let obj = self.pools.lock().get(pool).map(|i| i.ds.obj().clone()).ok_or_else(|| fail("no such pool".into()))?;
        if obj.readonly() {
            return Err(fail("pool is read-only".into()));
        }
        let result = if cancel || suspend { obj.trim_stop(devices, suspend) } else { obj.trim_start(devices, rate) };
        result.map_err(|e| fail(message(e)))?;
        if !cancel && !suspend {
            self.post_event(Event::new(pool, "trim_start", Severity::Info, "trim started"));
        }
        Ok(Response::text(""))
    }

    fn checkpoint(&self, pool: &str, discard: bool) -> HandlerResult {
        let fail = |why: String| {
            if discard {
                format!("cannot discard checkpoint in '{pool}': {why}")
            } else {
                format!("cannot checkpoint '{pool}': {why}")
            }
        };
        let obj = self.pools.lock().get(pool).map(|i| i.ds.obj().clone()).ok_or_else(|| fail("no such pool".into()))?;
        if discard {
            let freed = obj.checkpoint_discard().map_err(|e| fail(message(e)))?;
            self.post_event(Event::new(pool, "checkpoint_discard", Severity::Info, "checkpoint discarded"));
            return Ok(Response::data(serde_json::json!({ "freed": freed })));
        }
        let info = obj.checkpoint().map_err(|e| fail(message(e)))?;
        self.post_event(Event::new(pool, "checkpoint", Severity::Info, format!("checkpoint of txg {} created", info.txg)));
        let data = CheckpointData { txg: info.txg, created: info.created, held_bytes: info.held_bytes };
        Ok(Response::data(serde_json::to_value(data).map_err(|e| e.to_string())?))
    }
}
