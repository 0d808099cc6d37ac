// Typed wrappers for libcurl's variadic calls, which Swift cannot call.
// One wrapper per argument type; no logic lives here.
#ifndef ADCACHE_CCURL_SHIM_H
#define ADCACHE_CCURL_SHIM_H

#include <curl/curl.h>

typedef size_t (*adc_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*adc_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                     curl_off_t ultotal, curl_off_t ulnow);

static inline CURLcode adc_easy_setopt_long(CURL *h, CURLoption o, long v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode adc_easy_setopt_offt(CURL *h, CURLoption o, curl_off_t v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode adc_easy_setopt_string(CURL *h, CURLoption o, const char *v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode adc_easy_setopt_pointer(CURL *h, CURLoption o, void *v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode adc_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode adc_easy_setopt_data_callback(CURL *h, CURLoption o, adc_data_callback v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode adc_easy_setopt_xferinfo_callback(CURL *h, CURLoption o, adc_xferinfo_callback v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode adc_easy_getinfo_long(CURL *h, CURLINFO i, long *v) {
    return curl_easy_getinfo(h, i, v);
}
static inline CURLcode adc_easy_getinfo_offt(CURL *h, CURLINFO i, curl_off_t *v) {
    return curl_easy_getinfo(h, i, v);
}
static inline CURLcode adc_easy_getinfo_string(CURL *h, CURLINFO i, char **v) {
    return curl_easy_getinfo(h, i, v);
}
static inline curl_version_info_data *adc_version_info(void) {
    return curl_version_info(CURLVERSION_NOW);
}
static inline CURLMcode adc_multi_setopt_long(CURLM *m, CURLMoption o, long v) {
    return curl_multi_setopt(m, o, v);
}

#endif
