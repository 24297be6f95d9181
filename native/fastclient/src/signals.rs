//! A stop flag raised by the signal itself.
//!
//! With thousands of thread clients holding the GIL in turn, a Python-level
//! handler (or the thread that reads the signal's wake-up descriptor) waits
//! seconds for its turn before it can tell the clients to stop. This handler
//! runs in whatever thread the kernel interrupts, needs no GIL: it writes the
//! signal's number into the driver's stop byte (a stop the driver can tell
//! from a failing client's, which writes 1), then calls the handler it
//! replaced (Python's own C handler, which goes on as before: the
//! interrupt, the wake-up byte).

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use libc::{c_int, c_void, sigaction, siginfo_t, SA_ONSTACK, SA_RESTART, SA_SIGINFO, SIG_DFL, SIG_IGN};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

const SLOTS: usize = 65;
static FLAG: AtomicPtr<u8> = AtomicPtr::new(ptr::null_mut());
// the handler each signal had before ours (its function and flags)
static PREV: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static PREV_FLAGS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

extern "C" fn raise_flag(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let flag = FLAG.load(Ordering::Acquire);
    if !flag.is_null() {
        unsafe { ptr::write_volatile(flag, sig as u8) };
    }
    let Some(i) = usize::try_from(sig).ok().filter(|&i| i < SLOTS) else { return };
    let prev = PREV[i].load(Ordering::Acquire);
    if prev == SIG_DFL || prev == SIG_IGN {
        return;
    }
    unsafe {
        if PREV_FLAGS[i].load(Ordering::Acquire) as c_int & SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = std::mem::transmute(prev);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(prev);
            f(sig);
        }
    }
}

/// From now on, ``signals`` write their number at ``addr`` (a byte the caller keeps
/// alive until it calls ``stop_on_signal(0, ...)``) before their own
/// handler runs. A signal whose handler is the default or ignored is left
/// alone (nothing would run after ours).
#[pyfunction]
pub fn stop_on_signal(addr: usize, signals: Vec<c_int>) -> PyResult<()> {
    FLAG.store(addr as *mut u8, Ordering::Release);
    if addr == 0 {
        return Ok(()); // ours stays installed: it only passes signals on
    }
    for sig in signals {
        let i = usize::try_from(sig).ok().filter(|&i| i > 0 && i < SLOTS);
        let Some(i) = i else { return Err(PyOSError::new_err(format!("no signal {sig}"))) };
        unsafe {
            let mut old: sigaction = std::mem::zeroed();
            if libc::sigaction(sig, ptr::null(), &mut old) != 0 {
                return Err(PyOSError::new_err(std::io::Error::last_os_error().to_string()));
            }
            let ours = raise_flag as *const () as usize;
            if old.sa_sigaction == ours || old.sa_sigaction == SIG_DFL || old.sa_sigaction == SIG_IGN {
                continue;
            }
            PREV[i].store(old.sa_sigaction, Ordering::Release);
            PREV_FLAGS[i].store(old.sa_flags as usize, Ordering::Release);
            let mut new = old;
            new.sa_sigaction = ours;
            new.sa_flags = SA_SIGINFO | (old.sa_flags & (SA_ONSTACK | SA_RESTART));
            if libc::sigaction(sig, &new, ptr::null_mut()) != 0 {
                return Err(PyOSError::new_err(std::io::Error::last_os_error().to_string()));
            }
        }
    }
    Ok(())
}
