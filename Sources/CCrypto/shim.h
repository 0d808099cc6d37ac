// OpenSSL's libcrypto, for SHA-256 (EVP digest interface).
#ifndef ADCACHE_CCRYPTO_SHIM_H
#define ADCACHE_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#endif
