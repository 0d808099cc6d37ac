// Typed wrappers for libcurl's variadic calls, which Swift cannot call, and nothing else.
//
// libcurl is loaded with dlopen when a transfer first needs it (AdCacheKit/Curl/CurlAPI.swift),
// not linked: its thirty dependent libraries would add milliseconds to every `adcache next`,
// which never touches the network. So each wrapper takes the function it calls, as looked up
// by dlsym, and calls it with the right argument type.
#ifndef ADCACHE_CCURL_SHIM_H
#define ADCACHE_CCURL_SHIM_H

#include <curl/curl.h>

typedef size_t (*adc_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*adc_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                                     curl_off_t ulnow);

typedef CURLcode (*adc_easy_setopt_fn)(CURL *, CURLoption, ...);
typedef CURLcode (*adc_easy_getinfo_fn)(CURL *, CURLINFO, ...);
typedef CURLMcode (*adc_multi_setopt_fn)(CURLM *, CURLMoption, ...);

static inline CURLcode adc_easy_setopt_long(void *fn, CURL *h, CURLoption o, long v) {
    return ((adc_easy_setopt_fn)fn)(h, o, v);
}
static inline CURLcode adc_easy_setopt_offt(void *fn, CURL *h, CURLoption o, curl_off_t v) {
    return ((adc_easy_setopt_fn)fn)(h, o, v);
}
static inline CURLcode adc_easy_setopt_string(void *fn, CURL *h, CURLoption o, const char *v) {
    return ((adc_easy_setopt_fn)fn)(h, o, v);
}
static inline CURLcode adc_easy_setopt_pointer(void *fn, CURL *h, CURLoption o, void *v) {
    return ((adc_easy_setopt_fn)fn)(h, o, v);
}
static inline CURLcode adc_easy_setopt_slist(void *fn, CURL *h, CURLoption o, struct curl_slist *v) {
    return ((adc_easy_setopt_fn)fn)(h, o, v);
}
static inline CURLcode adc_easy_setopt_data_callback(void *fn, CURL *h, CURLoption o, adc_data_callback v) {
    return ((adc_easy_setopt_fn)fn)(h, o, v);
}
static inline CURLcode adc_easy_setopt_xferinfo_callback(void *fn, CURL *h, CURLoption o, adc_xferinfo_callback v) {
    return ((adc_easy_setopt_fn)fn)(h, o, v);
}
static inline CURLcode adc_easy_getinfo_offt(void *fn, CURL *h, CURLINFO i, curl_off_t *v) {
    return ((adc_easy_getinfo_fn)fn)(h, i, v);
}
static inline CURLcode adc_easy_getinfo_long(void *fn, CURL *h, CURLINFO i, long *v) {
    return ((adc_easy_getinfo_fn)fn)(h, i, v);
}
static inline CURLcode adc_easy_getinfo_string(void *fn, CURL *h, CURLINFO i, char **v) {
    return ((adc_easy_getinfo_fn)fn)(h, i, v);
}
static inline CURLMcode adc_multi_setopt_long(void *fn, CURLM *m, CURLMoption o, long v) {
    return ((adc_multi_setopt_fn)fn)(m, o, v);
}
/// CURLVERSION_NOW is a macro Swift cannot see.
static inline CURLversion adc_version_now(void) {
    return CURLVERSION_NOW;
}

#endif
