/* The pod sandbox's process for the CRI end-to-end tests: holds the pod's namespaces and sleeps until told
 * to stop, like Kubernetes' own pause. Built statically at test time (tests/cri/src/image.rs) and packed into
 * an OCI archive imported with `ctr`; no registry, no binary in the repository. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = stop;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = reap;
	sigaction(SIGCHLD, &sa, NULL);
	for (;;)
		pause();
	return 0;
}
