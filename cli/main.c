/* main.c - `tessera`: one command, subcommands, --help on each. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    { "up", cmd_up, "start a local cluster (a master and N shards) until Ctrl-C" },
    { "status", cmd_status, "show the cluster: epoch, shards, workers" },
    { "run", cmd_run, "run N copies of your training program as one job's ranks "
                      "(python3 train.py, ...)" },
    { "train", cmd_train, "train the built-in MLP on Fashion-MNIST (N workers, or --local)" },
    { "eval", cmd_eval, "evaluate a running job's parameters now, ahead of its training" },
    { "snapshot", cmd_snapshot, "snapshots: create, list, log, show, diff, rollback, gc, fsck" },
    { "verify", cmd_verify, "audit model state: compare snapshots or files (bits, cosine, dist)" },
    { "certs", cmd_certs, "a cluster's TLS certificates: init DIR (a CA and one per role), "
                          "show FILE" },
    { "demo", cmd_demo, "start a local cluster, show it, stop it (what `make demo` runs)" },
    { NULL, NULL, NULL },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera <command> [options]\n\n"
               "Tessera: a parameter server whose training is bit-for-bit reproducible.\n\n"
               "commands:\n");
    for (int i = 0; commands[i].name; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`tessera <command> --help` shows a command's options. The master address\n"
               "comes from --master, then $TESSERA_MASTER, then 127.0.0.1:7070.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tessera %s\n", TESSERA_VERSION);
        return 0;
    }
    for (int i = 0; commands[i].name; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "tessera: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
