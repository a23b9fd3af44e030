// The simulated device's kernel runtime: a grid runs block by block on the calling host thread
// (a stream's worker), every thread of a block a fiber with its own stack. A fiber runs until
// it exits or waits (__syncthreads, a warp collective); the block's scheduler releases a
// barrier once every live thread of the block waits at it, and a warp collective once every
// lane of its mask does. Anything a GPU would hang on or leave undefined (a barrier some
// threads never reach, a collective whose mask names an exited lane, lanes that disagree on
// the mask) fails the launch with a sentence saying which block and threads.
//
// A fault inside a kernel (an access past the end of an allocation lands on its guard page,
// sim/src/mem.rs) is caught by a SIGSEGV handler that jumps back here; the launch fails
// with the faulting address, which the Rust side names against the allocations.
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <ucontext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "sim_cuda.h"
#include "sim_kernels.h"

thread_local SimThread* stoke_sim_cur_thread = nullptr;
thread_local SimBlock* stoke_sim_cur_block = nullptr;

namespace {

// ---- fibers --------------------------------------------------------------------------------

constexpr size_t kStack = 256 * 1024;  // per thread; the first page is a guard

#if defined(__x86_64__)
// Saves the callee-saved registers and the FP control words on the current stack, stores the
// stack pointer in *from, switches to `to` and restores the same from there.
extern "C" void stoke_sim_switch(void** from, void* to);
extern "C" void stoke_sim_fiber_start();
asm(R"(
    .text
    .globl stoke_sim_switch
    .type stoke_sim_switch,@function
stoke_sim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size stoke_sim_switch, .-stoke_sim_switch
    .globl stoke_sim_fiber_start
    .type stoke_sim_fiber_start,@function
stoke_sim_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size stoke_sim_fiber_start, .-stoke_sim_fiber_start
)");
#else
#error "the simulated device's fibers are written for x86_64"
#endif

enum State : unsigned char { READY, AT_BARRIER, AT_WARP, EXITED };

struct Fiber {
    void* stack = nullptr;  // mapping base (guard page first)
    void* sp = nullptr;
    SimThread t{};
    State state = READY;
    // The pending warp collective.
    unsigned mask = 0;
    uint64_t value = 0;
    int src = -1;
    size_t bytes = 0;
    void* out = nullptr;
    unsigned* ballot = nullptr;
};

struct Worker {
    std::vector<Fiber> fibers;
    void* sched_sp = nullptr;
    Fiber* cur = nullptr;
    const SimKernel* kernel = nullptr;
    void** params = nullptr;
    SimBlock block{};
    sigjmp_buf fault_jump;
    volatile sig_atomic_t in_kernel = 0;
    uintptr_t fault_addr = 0;
    char* altstack = nullptr;
};

thread_local Worker* tw = nullptr;

Worker* worker() {
    if (!tw) tw = new Worker();  // one per stream thread, kept for the thread's life
    return tw;
}

void fiber_main(Fiber* f) {
    Worker* w = tw;
    w->kernel->invoke(w->params);
    f->state = EXITED;
    stoke_sim_switch(&f->sp, w->sched_sp);
    abort();  // an exited fiber is never resumed
}

void fiber_reset(Fiber* f) {
    if (!f->stack) {
        void* m = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            perror("stoke-sim: fiber stack");
            abort();
        }
        mprotect(m, 4096, PROT_NONE);
        f->stack = m;
    }
    uintptr_t top = ((uintptr_t)f->stack + kStack) & ~(uintptr_t)15;
    uint64_t* a = (uint64_t*)(top - 24);  // the return slot: after `ret`, rsp is 16-aligned
    a[0] = (uint64_t)(uintptr_t)&stoke_sim_fiber_start;
    a[-1] = 0;                            // rbp
    a[-2] = 0;                            // rbx
    a[-3] = (uint64_t)(uintptr_t)f;       // r12: the argument
    a[-4] = (uint64_t)(uintptr_t)&fiber_main;  // r13: the function
    a[-5] = 0;                            // r14
    a[-6] = 0;                            // r15
    uint32_t* ctl = (uint32_t*)(a - 7);
    ctl[0] = 0x1F80;  // MXCSR: round to nearest, exceptions masked
    ctl[1] = 0x037F;  // x87 control word
    f->sp = a - 7;
    f->state = READY;
}

void run(Worker* w, Fiber* f) {
    w->cur = f;
    stoke_sim_cur_thread = &f->t;
    stoke_sim_switch(&w->sched_sp, f->sp);
}

void block_wait(State s) {
    Worker* w = tw;
    Fiber* f = w->cur;
    f->state = s;
    stoke_sim_switch(&f->sp, w->sched_sp);
}

// ---- faults --------------------------------------------------------------------------------

struct sigaction g_old_segv, g_old_bus, g_old_trap;

// A host thread's access to a guarded pinned page (sim/src/dev.rs): the Rust side reports a
// hazard (3: retry, the page's protection was updated) or says the byte is not guarded though
// its page is (2: the access is single-stepped with the page open, then the page's protection
// is restored on the trap).
extern "C" int stoke_sim_host_fault(uintptr_t addr, int write);
extern "C" int stoke_sim_page_prot(uintptr_t page);
thread_local uintptr_t t_step_page = 0;
constexpr unsigned long long kTrapFlag = 0x100;

void chain(int sig, siginfo_t* info, void* uctx, struct sigaction* old) {
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, info, uctx);
            return;
        }
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    sigaction(sig, old, nullptr);
}

void on_trap(int sig, siginfo_t* info, void* uctx) {
    ucontext_t* uc = (ucontext_t*)uctx;
    if (t_step_page) {
        mprotect((void*)t_step_page, 4096, stoke_sim_page_prot(t_step_page));
        t_step_page = 0;
        uc->uc_mcontext.gregs[REG_EFL] &= ~(greg_t)kTrapFlag;
        return;
    }
    chain(sig, info, uctx, &g_old_trap);
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
    Worker* w = tw;
    if (w && w->in_kernel) {
        w->in_kernel = 0;
        w->fault_addr = (uintptr_t)info->si_addr;
        siglongjmp(w->fault_jump, 1);
    }
    if (sig == SIGSEGV) {
        ucontext_t* uc = (ucontext_t*)uctx;
        const uintptr_t addr = (uintptr_t)info->si_addr;
        const int write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
        const int r = stoke_sim_host_fault(addr, write);
        if (r == 3) return;
        if (r == 2) {
            const uintptr_t page = addr & ~(uintptr_t)4095;
            mprotect((void*)page, 4096, PROT_READ | PROT_WRITE);
            t_step_page = page;
            uc->uc_mcontext.gregs[REG_EFL] |= (greg_t)kTrapFlag;
            return;
        }
    }
    // Not ours: hand it to whoever handled it before (Rust's stack-overflow report, or the
    // default action, which dumps core once we return and the access repeats).
    chain(sig, info, uctx, sig == SIGSEGV ? &g_old_segv : &g_old_bus);
}

void install_fault_handler() {
    static bool done = false;
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&m);
    if (!done) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_old_segv);
        sigaction(SIGBUS, &sa, &g_old_bus);
        struct sigaction st = sa;
        st.sa_sigaction = on_trap;
        sigaction(SIGTRAP, &st, &g_old_trap);
        done = true;
    }
    pthread_mutex_unlock(&m);
}

// The handler runs on an alternate stack: a fiber that overflowed its own has none left.
void ensure_altstack(Worker* w) {
    stack_t cur;
    if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return;
    const size_t n = 64 * 1024;
    w->altstack = (char*)malloc(n);
    stack_t ss;
    ss.ss_sp = w->altstack;
    ss.ss_size = n;
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
}

int fail(char* err, size_t len, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int fail(char* err, size_t len, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return 1;
}

const char* state_name(State s) {
    switch (s) {
        case READY: return "running";
        case AT_BARRIER: return "at __syncthreads";
        case AT_WARP: return "at a warp collective";
        default: return "exited";
    }
}

// Release what can be released; 0 when nothing could (a hang on a GPU).
int release(Worker* w, unsigned n, char* err, size_t len) {
    std::vector<Fiber>& fs = w->fibers;
    bool all_barrier = true;
    for (unsigned i = 0; i < n; i++) {
        if (fs[i].state != EXITED && fs[i].state != AT_BARRIER) all_barrier = false;
    }
    bool any = false;
    if (all_barrier) {
        for (unsigned i = 0; i < n; i++) {
            if (fs[i].state == AT_BARRIER) {
                fs[i].state = READY;
                any = true;
            }
        }
        if (any) return 1;
    }
    for (unsigned base = 0; base < n; base += 32) {
        const unsigned lanes = n - base < 32 ? n - base : 32;
        int first = -1;
        for (unsigned l = 0; l < lanes; l++) {
            if (fs[base + l].state == AT_WARP) {
                first = (int)l;
                break;
            }
        }
        if (first < 0) continue;
        const unsigned mask = fs[base + first].mask;
        bool complete = true;
        for (unsigned l = 0; l < 32; l++) {
            if (!(mask >> l & 1u)) continue;
            if (l >= lanes || fs[base + l].state == EXITED) {
                return -fail(err, len, "warp %u: a collective's mask 0x%08x names lane %u, which %s", base / 32, mask,
                             l, l >= lanes ? "does not exist in this block" : "has exited");
            }
            if (fs[base + l].state != AT_WARP) {
                complete = false;
            } else if (fs[base + l].mask != mask) {
                return -fail(err, len, "warp %u: lanes %d and %u reached a collective with different masks (0x%08x, 0x%08x)",
                             base / 32, first, l, mask, fs[base + l].mask);
            }
        }
        if (!complete) continue;
        unsigned ballot = 0;
        for (unsigned l = 0; l < 32; l++) {
            if (mask >> l & 1u && fs[base + l].value != 0) ballot |= 1u << l;
        }
        for (unsigned l = 0; l < 32; l++) {
            if (!(mask >> l & 1u)) continue;
            Fiber& f = fs[base + l];
            const int s = f.src;
            const uint64_t v = s >= 0 && s < 32 && (mask >> s & 1u) ? fs[base + s].value : f.value;
            memcpy(f.out, &v, f.bytes);
            if (f.ballot) *f.ballot = ballot;
            f.state = READY;
        }
        any = true;
    }
    if (any) return 1;
    // Nothing can move: describe the first threads that wait.
    char buf[256] = "";
    size_t at = 0;
    for (unsigned i = 0, shown = 0; i < n && shown < 4; i++) {
        if (fs[i].state == EXITED) continue;
        at += snprintf(buf + at, sizeof buf - at, "%sthread (%u,%u,%u) %s", shown ? ", " : "", fs[i].t.thread_idx.x,
                       fs[i].t.thread_idx.y, fs[i].t.thread_idx.z, state_name(fs[i].state));
        shown++;
        if (at >= sizeof buf) break;
    }
    return -fail(err, len, "the block can never finish (a hang on a GPU): %s", buf);
}

}  // namespace

void stoke_sim_syncthreads() { block_wait(AT_BARRIER); }

unsigned stoke_sim_lane() {
    const SimThread& t = *stoke_sim_cur_thread;
    const SimBlock& b = *stoke_sim_cur_block;
    const unsigned linear = t.thread_idx.x + b.block_dim.x * (t.thread_idx.y + b.block_dim.y * t.thread_idx.z);
    return linear % 32u;
}

void stoke_sim_warp_exchange(unsigned mask, const void* in, size_t bytes, int src, void* out, unsigned* ballot) {
    Fiber* f = tw->cur;
    f->mask = mask;
    f->value = 0;
    memcpy(&f->value, in, bytes);
    f->bytes = bytes;
    f->src = src;
    f->out = out;
    f->ballot = ballot;
    block_wait(AT_WARP);
}

extern "C" {

void stoke_sim_install_fault_handler() { install_fault_handler(); }

unsigned stoke_sim_kernel_count() { return stoke_sim_kernel_table_len; }
const SimKernel* stoke_sim_kernel(unsigned i) { return i < stoke_sim_kernel_table_len ? &stoke_sim_kernel_table[i] : nullptr; }

// Run kernel `index` over the whole grid. 0: done. 1: the launch failed, `err` says why.
// 2: a fault at *fault_addr in block `fault_block` (x, y, z) — the caller names the address.
int stoke_sim_launch(unsigned index, const unsigned grid[3], const unsigned block[3], void** params, char* err,
                     size_t err_len, uintptr_t* fault_addr, unsigned fault_block[3], unsigned fault_thread[3]) {
    if (index >= stoke_sim_kernel_table_len) return fail(err, err_len, "no kernel %u", index);
    install_fault_handler();
    Worker* w = worker();
    ensure_altstack(w);
    const unsigned n = block[0] * block[1] * block[2];
    if (w->fibers.size() < n) w->fibers.resize(n);
    w->kernel = &stoke_sim_kernel_table[index];
    w->params = params;
    w->block.grid_dim = {grid[0], grid[1], grid[2]};
    w->block.block_dim = {block[0], block[1], block[2]};
    stoke_sim_cur_block = &w->block;
    if (sigsetjmp(w->fault_jump, 1)) {
        *fault_addr = w->fault_addr;
        fault_block[0] = w->block.block_idx.x;
        fault_block[1] = w->block.block_idx.y;
        fault_block[2] = w->block.block_idx.z;
        if (w->cur) {
            fault_thread[0] = w->cur->t.thread_idx.x;
            fault_thread[1] = w->cur->t.thread_idx.y;
            fault_thread[2] = w->cur->t.thread_idx.z;
        }
        stoke_sim_cur_thread = nullptr;
        stoke_sim_cur_block = nullptr;
        return 2;
    }
    for (unsigned bz = 0; bz < grid[2]; bz++)
        for (unsigned by = 0; by < grid[1]; by++)
            for (unsigned bx = 0; bx < grid[0]; bx++) {
                w->block.block_idx = {bx, by, bz};
                for (unsigned i = 0; i < n; i++) {
                    Fiber& f = w->fibers[i];
                    fiber_reset(&f);
                    f.t.thread_idx = {i % block[0], (i / block[0]) % block[1], i / (block[0] * block[1])};
                }
                for (;;) {
                    bool live = false;
                    w->in_kernel = 1;
                    for (unsigned i = 0; i < n; i++) {
                        if (w->fibers[i].state == READY) run(w, &w->fibers[i]);
                        if (w->fibers[i].state != EXITED) live = true;
                    }
                    w->in_kernel = 0;
                    if (!live) break;
                    const int r = release(w, n, err, err_len);
                    if (r < 0) {
                        char tail[64];
                        snprintf(tail, sizeof tail, " (block %u,%u,%u)", bx, by, bz);
                        strncat(err, tail, err_len - strlen(err) - 1);
                        stoke_sim_cur_thread = nullptr;
                        stoke_sim_cur_block = nullptr;
                        return 1;
                    }
                }
            }
    stoke_sim_cur_thread = nullptr;
    stoke_sim_cur_block = nullptr;
    return 0;
}

}  // extern "C"
