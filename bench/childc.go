package main

// childC is the child the contenders run, in C: where a C compiler is
// found, the bench builds it, since it starts in a fraction of the time a
// Go program takes, and a child's start is part of every gap measured.
// Without one, the bench builds bench/child.go, which does the same.
//
//	child LOG HOLD
//
// appends "S pid ns ppid token" when it starts and "E pid ns" when it ends
// to LOG, on CLOCK_MONOTONIC, which every process of the host shares; token
// is semrun's $SEMRUN_FENCING_TOKEN, 0 without it. It holds for HOLD
// seconds, or with HOLD gate:PATH until PATH exists. It dies with its
// parent, so a killed contender leaves no child behind.
const childC = `#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static long long now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fail(const char *msg) {
	dprintf(2, "child: %s\n", msg);
	exit(2);
}

int main(int argc, char **argv) {
	long long began = now();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	int ppid = getppid();
	if (ppid == 1) return 1;
	if (argc != 3) fail("usage: child LOG HOLD|gate:PATH");
	int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) fail("cannot open the log");
	const char *token = getenv("SEMRUN_FENCING_TOKEN");
	char line[160];
	int n = snprintf(line, sizeof line, "S %d %lld %d %s\n", getpid(), began, ppid, token && *token ? token : "0");
	if (write(fd, line, n) != n) fail("cannot write the log");
	if (strncmp(argv[2], "gate:", 5) == 0) {
		struct stat st;
		long long deadline = began + 120LL * 1000000000LL;
		struct timespec ms = {0, 1000000};
		while (stat(argv[2] + 5, &st) != 0) {
			if (now() > deadline) fail("the gate never opened");
			nanosleep(&ms, NULL);
		}
	} else {
		char *end;
		double s = strtod(argv[2], &end); // seconds
		if (end == argv[2] || *end) fail("HOLD: want seconds, like 0.05");
		struct timespec d = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
		while (nanosleep(&d, &d) != 0) {}
	}
	n = snprintf(line, sizeof line, "E %d %lld\n", getpid(), now());
	if (write(fd, line, n) != n) fail("cannot write the log");
	return 0;
}
`
