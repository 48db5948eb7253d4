// tdaot-bench-maxrss: runs a command and reports its peak resident set, for the footprint table
// (benchmarks/footprint.py). Linux keeps a process's maxrss across execve, so a command forked
// straight from the Python driver would report at least the driver's own resident set; forked
// from this small program it reports its own.
//
//   tdaot-bench-maxrss COMMAND [ARGS...]
//
// The command's stdout and stderr pass through; at its end one line on stderr:
// "tdaot-bench-maxrss: maxrss_kib=N status=S" (ru_maxrss of the command, its exit status, or
// 128 + the signal that ended it), and this program exits with that status.
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tdaot-bench-maxrss COMMAND [ARGS...]\n");
    return 2;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    perror("tdaot-bench-maxrss: fork");
    return 2;
  }
  if (pid == 0) {
    execvp(argv[1], argv + 1);
    perror("tdaot-bench-maxrss: exec");
    _exit(127);
  }
  int status = 0;
  struct rusage usage;
  if (wait4(pid, &status, 0, &usage) < 0) {
    perror("tdaot-bench-maxrss: wait4");
    return 2;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  fprintf(stderr, "tdaot-bench-maxrss: maxrss_kib=%ld status=%d\n", usage.ru_maxrss, code);
  return code;
}
