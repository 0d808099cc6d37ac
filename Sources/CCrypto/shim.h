// OpenSSL's libcrypto, for SHA-256: its declarations only. The library is
// dlopen'ed by the first digest (AdCacheKit/Support/SHA256.swift), so that `adcache next`,
// which computes none, does not pay for loading it.
#ifndef ADCACHE_CCRYPTO_SHIM_H
#define ADCACHE_CCRYPTO_SHIM_H
#include <openssl/sha.h>
#endif
