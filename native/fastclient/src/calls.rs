//! ``loops.closed`` for a Python op: the driver's closed loop with the
//! clock, the latency slots, the progress slot and the stop flag in Rust,
//! the op still a Python callable.
//!
//! The Python loop spends about three times the null op's own cost per
//! operation on its bookkeeping (a clock call that makes an int, three
//! memoryview items); here each is a machine instruction or a vDSO call,
//! so the harness's ceiling is the op's call itself.
//!
//! The GIL is held between ops as the Python loop holds it; the op's own
//! code lets other threads and signal handlers in, as it does there, and
//! every ``YIELD_NS`` the loop does so itself (an op that is a C function
//! runs no Python code that would): pending signal handlers run, and a
//! thread waiting for the GIL gets it.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};

use pyo3::prelude::*;

use crate::now;

const YIELD_NS: i64 = 5_000_000; // CPython's default switch interval

/// ``op(i)`` for slots ``start..n`` (op index ``i``, then ``i + step``, ...),
/// each slot's latency from the end of the op before (the first from ``t``)
/// written into ``lat``, until the deadline or the stop flag; returns the
/// slots used. An op that raises ends the call with its exception, its
/// slot unwritten and the progress slot at its index (as loops.closed).
#[pyfunction]
#[pyo3(signature = (op, start, lat, n, i, step, deadline, stop, prog, t))]
#[allow(clippy::too_many_arguments)]
pub fn closed_calls(
    py: Python<'_>,
    op: &Bound<'_, PyAny>,
    start: usize,
    lat: usize,
    n: usize,
    mut i: i64,
    step: i64,
    deadline: i64,
    stop: usize,
    prog: usize,
    mut t: i64,
) -> PyResult<usize> {
    let (lat, stop, prog) = (
        lat as *mut i64,
        stop as *const AtomicU8,
        prog as *const AtomicI64,
    );
    let mut turn = t;
    for j in start..n {
        // SAFETY: the driver's buffers, alive for the call; j < n, lat's length
        unsafe { (*prog).store(j as i64, Ordering::Relaxed) };
        op.call1((i,))?;
        let t1 = now();
        unsafe { *lat.add(j) = t1 - t };
        t = t1;
        i += step;
        if t1 >= deadline || unsafe { (*stop).load(Ordering::Relaxed) } != 0 {
            return Ok(j + 1);
        }
        if t1 - turn >= YIELD_NS {
            py.check_signals()?;
            py.allow_threads(|| ());
            turn = t1;
        }
    }
    Ok(n)
}
