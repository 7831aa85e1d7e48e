/* A compiled prover under the lane agent, speaking its line protocol on KUZK_LANE_SOCKET
 * directly (no process per call): the partition pod's command is
 *   kuzk-lane run --calls -- /path/to/prover
 * Build: cc -O2 -o prover prover.c
 *
 * Each call is one line, each reply one line: "ok ..." or "error <what was wrong>".
 * The work stands in for a real engine: synthesis and GPU work are sleeps
 * (PROVER_SYNTH_SECONDS, PROVER_GPU_SECONDS), and the commitment is the 64-bit FNV-1a hash
 * of "<KUZK_JOB_UID>/<KUZK_PARTITION>" in hex. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static FILE *lane_in, *lane_out;

/* Send one call and read its reply; exit 1 (a retryable failure) if the agent refuses. */
static void call(const char *line) {
    char reply[8192];
    fprintf(lane_out, "%s\n", line);
    fflush(lane_out);
    if (!fgets(reply, sizeof reply, lane_in)) {
        fprintf(stderr, "prover: the lane agent closed the connection\n");
        exit(1);
    }
    if (strncmp(reply, "ok", 2) != 0) {
        fprintf(stderr, "prover: %s: %s", line, reply);
        exit(1);
    }
}

static int connect_lane(void) {
    const char *name = getenv("KUZK_LANE_SOCKET");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    socklen_t len;
    int fd;
    if (!name || !*name || strlen(name) >= sizeof addr.sun_path) {
        fprintf(stderr, "prover: KUZK_LANE_SOCKET is not set: run under kuzk-lane run --calls\n");
        exit(1);
    }
    strcpy(addr.sun_path, name);
    len = offsetof(struct sockaddr_un, sun_path) + strlen(name);
    if (name[0] == '@')
        addr.sun_path[0] = '\0'; /* Linux's abstract namespace */
    else
        len += 1;
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, len) != 0) {
        fprintf(stderr, "prover: no lane agent at %s: %s\n", name, strerror(errno));
        exit(1);
    }
    return fd;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void work(const char *seconds_env, double fallback) {
    const char *text = getenv(seconds_env);
    double seconds = text ? atof(text) : fallback;
    struct timespec t = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
}

int main(void) {
    const char *job = getenv("KUZK_JOB_UID"), *partition = getenv("KUZK_PARTITION");
    char key[512], line[512];
    uint64_t hash = 14695981039346656037ULL; /* FNV-1a 64 offset basis */
    double start, synth_ms, gpu_ms;
    int fd;

    if (!job || !partition) {
        fprintf(stderr, "prover: KUZK_JOB_UID and KUZK_PARTITION are required\n");
        return 2; /* invalid input: the partition fails without retry */
    }
    fd = connect_lane();
    lane_in = fdopen(fd, "r");
    lane_out = fdopen(dup(fd), "w");

    call("stage synthesizing");
    start = now_ms();
    work("PROVER_SYNTH_SECONDS", 0.5);
    synth_ms = now_ms() - start;
    call("stage synth_done");

    call("acquire"); /* blocks until this lane holds its GPU's phase */
    start = now_ms();
    work("PROVER_GPU_SECONDS", 1.0);
    gpu_ms = now_ms() - start;
    call("release-gpu");

    snprintf(key, sizeof key, "%s/%s", job, partition);
    for (const char *c = key; *c; c++)
        hash = (hash ^ (unsigned char)*c) * 1099511628211ULL;
    snprintf(line, sizeof line,
             "result {\"commitment\": \"0x%016llx\", \"synth_ms\": %.0f, \"gpu_ms\": %.0f}",
             (unsigned long long)hash, synth_ms, gpu_ms);
    call(line);
    return 0;
}
