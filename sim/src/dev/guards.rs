//! Pinned memory guards: the host's view of pinned bytes a queued stream op uses is protected
//! until the host knows the op ran, so a host access in between faults and is reported as a
//! hazard (the fault handler in sim/cpp/runtime.cpp asks [`stoke_sim_host_fault`]).

use super::*;

/// Pinned bytes a queued stream op uses, which the host must not touch until it knows the op
/// ran: not at all while the stream writes them (a device-to-host copy), not write while it
/// reads them (a host-to-device copy). Enforced on the host's view of the pages (the stream
/// works through the device's view): a host access faults and is reported as a hazard.
struct Guard {
    start: usize,
    end: usize,
    stream_writes: bool,
    actor: usize,
    seq: u64,
    what: String,
}

static GUARDS: Mutex<Vec<Guard>> = Mutex::new(Vec::new());

const PAGE: usize = 4096;

/// The host view's protection page `page` must have under `guards`.
fn prot_of(guards: &[Guard], page: usize) -> i32 {
    let mut prot = libc::PROT_READ | libc::PROT_WRITE;
    for g in guards.iter().filter(|g| g.start < page + PAGE && page < g.end) {
        if g.stream_writes {
            return libc::PROT_NONE;
        }
        prot = libc::PROT_READ;
    }
    prot
}

fn reprotect(guards: &[Guard], start: usize, end: usize) {
    let (a, b) = mem::Alloc::pages(start, end);
    let mut p = a;
    while p < b {
        mem::protect(p, p + PAGE, prot_of(guards, p));
        p += PAGE;
    }
}

pub(super) fn guard_add(actor: usize, seq: u64, accesses: &[Access]) {
    let mut g = GUARDS.lock().unwrap_or_else(|p| p.into_inner());
    for a in accesses.iter().filter(|a| a.alloc.kind == mem::Kind::Pinned && a.end > a.start) {
        g.push(Guard { start: a.start, end: a.end, stream_writes: a.write, actor, seq, what: a.what.clone() });
        reprotect(&g, a.start, a.end);
    }
}

pub(super) fn guards_release(host: &Clock) {
    let mut g = GUARDS.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_empty() {
        return;
    }
    let (done, keep): (Vec<Guard>, Vec<Guard>) = std::mem::take(&mut *g).into_iter().partition(|x| at(host, x.actor) >= x.seq);
    *g = keep;
    for d in &done {
        reprotect(&g, d.start, d.end);
    }
}

/// Drop the guards of an allocation being freed (its pages go with it).
pub fn guards_forget(start: usize, end: usize) {
    GUARDS.lock().unwrap_or_else(|p| p.into_inner()).retain(|x| x.end <= start || end <= x.start);
}

/// The fault handler's question (sim/cpp/runtime.cpp), for a host thread's fault at `addr`:
/// 3 — a guarded byte: the hazard is reported, the guard dropped, retry the access; 2 — a
/// guarded page but an unguarded byte: single-step the access with the page open; 0 — not
/// ours.
#[no_mangle]
pub extern "C" fn stoke_sim_host_fault(addr: usize, write: i32) -> i32 {
    let mut g = GUARDS.lock().unwrap_or_else(|p| p.into_inner());
    let page = addr & !(PAGE - 1);
    if let Some(i) = g.iter().position(|x| x.start <= addr && addr < x.end && (x.stream_writes || write != 0)) {
        let x = g.remove(i);
        let msg = format!(
            "the host {} pinned memory at {addr:#x} while {} on {} still {} bytes {:#x}..{:#x} (no synchronize or event wait since it was queued){}",
            if write != 0 { "writes" } else { "reads" },
            x.what,
            actor_name(x.actor),
            if x.stream_writes { "writes" } else { "reads" },
            x.start,
            x.end,
            mem::find(addr).map(|a| format!(", in {}", a.label())).unwrap_or_default()
        );
        reprotect(&g, x.start, x.end);
        drop(g);
        hb(|h| h.hazards += 1);
        crate::report("hazard", msg);
        return 3;
    }
    if g.iter().any(|x| x.start < page + PAGE && page < x.end) {
        return 2;
    }
    0
}

/// The protection page `page`'s host view must have now (after a single-stepped access).
#[no_mangle]
pub extern "C" fn stoke_sim_page_prot(page: usize) -> i32 {
    prot_of(&GUARDS.lock().unwrap_or_else(|p| p.into_inner()), page)
}
