// Exit 0 when AMX tile instructions really run here. /proc/cpuinfo can list
// amx_int8 while the hypervisor does not let a guest use the tile state; then
// any tile instruction raises SIGILL, which is caught and reported.
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <setjmp.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static sigjmp_buf env;
static void on_sigill(int sig) { (void)sig; siglongjmp(env, 1); }

int main(void) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        puts("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused");
        return 1;
    }
    // Palette 1, tile 0 as 16 rows of 64 bytes.
    uint8_t cfg[64] __attribute__((aligned(64)));
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;
    cfg[16] = 64;  // colsb[0] (u16, little-endian)
    cfg[48] = 16;  // rows[0]
    int32_t out[256] __attribute__((aligned(64)));
    signal(SIGILL, on_sigill);
    if (sigsetjmp(env, 1)) {
        puts("tile instructions raise SIGILL");
        return 1;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
    __asm__ volatile("tilezero %%tmm0" ::);
    __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(out), "r"((long)64) : "memory");
    __asm__ volatile("tilerelease" ::);
    puts("AMX tiles usable");
    return 0;
}
