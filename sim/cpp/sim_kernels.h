// A kernel of the simulated device: its name, its parameters as the launch checks them
// (count, sizes, which are pointers and whether they are const), __launch_bounds__, and a
// function that calls it with the launch's parameter array. sim/build.rs generates the table
// from kernels/*.cu (every `extern "C" __global__` function), so the list is never written by
// hand.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <type_traits>
#include <utility>

extern "C" {
struct SimKernel {
    const char* name;
    unsigned nparams;
    const size_t* sizes;      // nparams entries
    const unsigned char* kinds;  // 0 value, 1 pointer, 2 pointer to const
    unsigned max_threads;     // __launch_bounds__, else 1024
    void (*invoke)(void** params);
};
extern const SimKernel stoke_sim_kernel_table[];
extern const unsigned stoke_sim_kernel_table_len;
}

template <typename T>
constexpr unsigned char stoke_sim_kind() {
    using P = std::remove_cv_t<T>;
    if constexpr (std::is_pointer_v<P>) {
        return std::is_const_v<std::remove_pointer_t<P>> ? 2 : 1;
    } else {
        return 0;
    }
}

template <auto F>
struct StokeSimEntry;

template <typename... A, void (*F)(A...)>
struct StokeSimEntry<F> {
    static constexpr size_t sizes[sizeof...(A) + 1] = {sizeof(A)..., 0};
    static constexpr unsigned char kinds[sizeof...(A) + 1] = {stoke_sim_kind<A>()..., 0};
    template <size_t... I>
    static void call(void** p, std::index_sequence<I...>) {
        F(*static_cast<std::remove_cv_t<A>*>(p[I])...);
    }
    static void invoke(void** p) { call(p, std::index_sequence_for<A...>{}); }
    static SimKernel entry(const char* name, unsigned max_threads) {
        return SimKernel{name, (unsigned)sizeof...(A), sizes, kinds, max_threads, &invoke};
    }
};

#define STOKE_SIM_KERNEL(name, bounds) StokeSimEntry<&name>::entry(#name, bounds)
