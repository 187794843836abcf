/* scripts/bench timer: `bench-spawn RESULT_FILE PROG ARG...` execs PROG (argv[0] = the first ARG) with the
 * inherited stdin/stdout/stderr/environment, waits for it and writes one line to RESULT_FILE:
 *   <wall ns> <exit code or 128+signal> <peak RSS KiB> <user+system CPU us>
 * Wall time is CLOCK_MONOTONIC from just before vfork to just after wait4, as a runtime (Go's os/exec uses
 * CLONE_VFORK) sees it. Peak RSS is wait4's ru_maxrss: the process and the children it waited for. This
 * launcher is a tiny static program because at exec the kernel records the old address space's peak in
 * ru_maxrss: spawning from the (large) Python driver would report the driver's size instead. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 4) {
		fputs("usage: bench-spawn RESULT_FILE PROG ARGV0 [ARG...]\n", stderr);
		return 2;
	}
	struct timespec t0, t1;
	struct rusage ru;
	int status = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid = vfork();
	if (pid == 0) {
		execv(argv[2], argv + 3);
		_exit(127);
	}
	if (pid < 0) {
		perror("bench-spawn: vfork");
		return 2;
	}
	if (wait4(pid, &status, 0, &ru) < 0) {
		perror("bench-spawn: wait4");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long ns = (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	long long cpu = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL + ru.ru_utime.tv_usec +
			ru.ru_stime.tv_usec;
	FILE *f = fopen(argv[1], "w");
	if (!f) {
		perror("bench-spawn: open result file");
		return 2;
	}
	fprintf(f, "%lld %d %ld %lld\n", ns, code, ru.ru_maxrss, cpu);
	return fclose(f) == 0 ? 0 : 2;
}
