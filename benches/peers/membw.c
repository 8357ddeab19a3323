// Streamed read bandwidth: sums a buffer of u64s with T OpenMP threads and
// prints the best of P passes in GB/s (1e9 bytes/s).
//
//   membw SIZE_MIB THREADS PASSES
//
// Decode of a small quantized model reads every weight once per token, so a
// buffer far past the last-level cache gives the DRAM ceiling on tokens/s;
// a buffer the size of the weights shows what a cache-resident model could
// reach instead. Summing (not memcpy) keeps it a pure read: no write-allocate
// traffic halving the number.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SIZE_MIB THREADS PASSES\n", argv[0]);
        return 2;
    }
    size_t bytes = (size_t)atol(argv[1]) << 20;
    int threads = atoi(argv[2]), passes = atoi(argv[3]);
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *a = aligned_alloc(4096, n * sizeof(uint64_t));
    if (!a) return 1;
    omp_set_num_threads(threads);
    // First touch from the threads that will read, so pages are mapped
    // (and, on NUMA hosts, placed) before timing starts.
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = i;
    uint64_t sink = 0;
    double best = 0;
    for (int p = 0; p < passes; p++) {
        uint64_t s = 0;
        double t0 = now();
#pragma omp parallel for schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += a[i];
        double dt = now() - t0;
        sink += s;
        double gbs = (double)(n * sizeof(uint64_t)) / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    // The sum is printed so the compiler cannot drop the loads.
    printf("%.2f %llu\n", best, (unsigned long long)sink);
    free(a);
    return 0;
}
