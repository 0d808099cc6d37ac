// See include/cargs.h. glibc calls the functions of .init_array with (argc, argv, envp), as
// it calls main: the arguments are taken there, with no file read.
#include "cargs.h"

static int saved_argc;
static char **saved_argv;

static void take(int argc, char **argv, char **envp) {
    (void)envp;
    saved_argc = argc;
    saved_argv = argv;
}

__attribute__((section(".init_array"), used)) static void (*const take_arguments)(int, char **, char **) = take;

int adc_argc(void) { return saved_argv ? saved_argc : 0; }
const char *adc_argv(int i) { return (saved_argv && i >= 0 && i < saved_argc) ? saved_argv[i] : ""; }
