// wake.c: what the same small work costs right after a sleep, against back
// to back. An agent that wakes once a second for a new process pays the
// sleep's price on everything it touches; on a VM whose host runs other
// work between its wake-ups that price moves from day to day, and with it
// every agent-level figure. agent-ab.sh prints this before its runs, so
// that runs of different days can be compared.
//
//	gcc -O2 -o /tmp/wake bench/wake.c && /tmp/wake [KiB]
//
// Each line: the sleep before each touch; the CPU time of touching KiB
// (256 by default: one byte of each 64-byte line), and how many times its
// cost back to back that is;
// the CPU time of the wake-up itself (the kernel's sleep and wake path:
// all the CPU time of the loop but the touch's).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long kib = argc > 1 ? atol(argv[1]) : 256;
	if (kib <= 0) {
		fprintf(stderr, "wake: %s: want KiB to touch\n", argv[1]);
		return 1;
	}
	size_t size = (size_t)kib << 10;
	volatile unsigned char *buf = malloc(size);
	if (!buf) {
		perror("wake");
		return 1;
	}
	for (size_t i = 0; i < size; i++)
		buf[i] = 0;
	// Nanoseconds slept before each touch; 0: back to back.
	static const long sleeps[] = {0, 1000000, 10000000, 100000000, 1000000000};
	double hot = 0;
	for (size_t s = 0; s < sizeof(sleeps) / sizeof(sleeps[0]); s++) {
		struct timespec d = {sleeps[s] / 1000000000, sleeps[s] % 1000000000};
		double touching = 0, until = wall_s() + 3, start = cpu_us();
		long n = 0;
		// At least 5 touches, and 3 s of them.
		while (n < 5 || wall_s() < until) {
			if (sleeps[s])
				nanosleep(&d, NULL);
			double t0 = cpu_us();
			for (size_t i = 0; i < size; i += 64)
				buf[i]++;
			touching += cpu_us() - t0;
			n++;
		}
		double each = touching / n, wake = (cpu_us() - start - touching) / n;
		if (!sleeps[s]) {
			hot = each;
			printf("back to back:  %7.1f us to touch %ld KiB, %ld times\n", each, kib, n);
			continue;
		}
		printf("sleep %4ld ms: %7.1f us to touch %ld KiB (%.0fx back to back), %.1f us to wake, %ld times\n",
		       sleeps[s] / 1000000, each, kib, each / hot, wake, n);
	}
	return 0;
}
