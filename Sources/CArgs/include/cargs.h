// The process's arguments as the C runtime handed them to the program, for `adcache`'s
// main.swift: Swift's CommandLine on Linux reads /proc/self/cmdline, which a chroot without
// /proc (an image build) does not have (SPEC §6 v4 "No /proc needed").
#ifndef ADCACHE_CARGS_H
#define ADCACHE_CARGS_H

/// The number of arguments, the program's name included; 0 when they could not be had.
int adc_argc(void);
/// Argument `i` (0 ≤ i < adc_argc()).
const char *adc_argv(int i);

#endif
