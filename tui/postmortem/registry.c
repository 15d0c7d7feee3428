/* registry.c -- registry_names (registry.h): fork, exec the trainer's `params`, read its lines. */
#include "tui/postmortem/registry.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/base.h"      // xrealloc, xstrdup
#include "tui/launch/launch.h" // launch_rank_program: the trainer next to bin/ddpdbg

int registry_names(const char *model, char ***names, int *n, char *err, size_t errlen) {
    *names = NULL;
    *n = 0;
    char train[PATH_MAX];
    if (launch_rank_program(train, sizeof train) < 0) { // it said why, on stderr
        if (errlen) err[0] = '\0';
        return -1;
    }
    int fd[2];
    if (pipe(fd) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    char arg[PATH_MAX + 8];
    snprintf(arg, sizeof arg, "model=%s", model);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) { // stdout and stderr into the pipe: a bad model's message is its output
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execl(train, train, "params", arg, (char *)NULL);
        fprintf(stderr, "cannot run %s: %s\n", train, strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char *line = NULL, first_other[512] = "";
    size_t cap = 0;
    ssize_t len;
    bool total = false;
    while ((len = getline(&line, &cap, f)) > 0) {
        line[strcspn(line, "\n")] = '\0';
        char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!strncmp(line, "total ", 6)) {
            total = true;
        } else if (sp1 && sp2 && atoi(line) == *n && line[0] >= '0' && line[0] <= '9') {
            *names = xrealloc(*names, sizeof(char *) * (size_t)(*n + 1));
            *sp2 = '\0';
            (*names)[(*n)++] = xstrdup(sp1 + 1);
        } else if (!first_other[0]) {
            snprintf(first_other, sizeof first_other, "%s", line);
        }
    }
    free(line);
    fclose(f);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && total && *n > 0) return 0;
    snprintf(err, errlen, "%s",
             first_other[0] ? first_other : "ddpdbg-train params printed no parameter");
    registry_free(*names, *n);
    *names = NULL;
    *n = 0;
    return -1;
}

void registry_free(char **names, int n) {
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}
