// The parts of libxml2's public ABI that cxml.c reads, declared here rather than taken from
// libxml2's headers: a package that depends on AdCacheKit by version cannot pass the include
// path those headers need (/usr/include/libxml2: an unsafe flag, and one SDK layout), and
// pkg-config would also link libxml2 into every program — which a launch would then load,
// with ICU (SPEC §6: `next` loads no library). libxml2 is dlopen'ed by the first XML feed.
//
// These are the leading fields of libxml2's `_xmlNode`, `_xmlAttr`, `_xmlDoc` and `_xmlError`,
// unchanged since libxml2 2.0 (programs read them directly), and the option bits cxml.c
// passes. Tests/adcacheTests/XMLABITests.swift compiles them beside libxml2's own headers
// and checks every offset, size and value against them.
#ifndef ADCACHE_LIBXML2_ABI_H
#define ADCACHE_LIBXML2_ABI_H

typedef unsigned char adc_xmlChar;

enum {
    ADC_XML_ELEMENT_NODE = 1,
    ADC_XML_TEXT_NODE = 3,
};

enum {
    ADC_XML_PARSE_NOERROR = 1 << 5,
    ADC_XML_PARSE_NOWARNING = 1 << 6,
    ADC_XML_PARSE_NONET = 1 << 11,
    ADC_XML_PARSE_NOCDATA = 1 << 14,
    ADC_XML_PARSE_HUGE = 1 << 19,
};

struct adc_xmlDoc;
struct adc_xmlAttr;

struct adc_xmlNode {
    void *_private;
    int type;
    const adc_xmlChar *name;
    struct adc_xmlNode *children;
    struct adc_xmlNode *last;
    struct adc_xmlNode *parent;
    struct adc_xmlNode *next;
    struct adc_xmlNode *prev;
    struct adc_xmlDoc *doc;
    void *ns;
    adc_xmlChar *content;
    struct adc_xmlAttr *properties;
};

struct adc_xmlAttr {
    void *_private;
    int type;
    const adc_xmlChar *name;
    struct adc_xmlNode *children;
    struct adc_xmlNode *last;
    struct adc_xmlNode *parent;
    struct adc_xmlAttr *next;
};

struct adc_xmlDoc {
    void *_private;
    int type;
    char *name;
    struct adc_xmlNode *children;
    struct adc_xmlNode *last;
    struct adc_xmlNode *parent;
    struct adc_xmlNode *next;
    struct adc_xmlNode *prev;
    struct adc_xmlDoc *doc;
    int compression;
    int standalone;
    void *intSubset;
    void *extSubset;
};

struct adc_xmlError {
    int domain;
    int code;
    char *message;
    int level;
    char *file;
    int line;
};

// xmlExternalEntityLoader: (URL, ID, parser context) -> parser input.
typedef void *(*adc_xmlExternalEntityLoader)(const char *url, const char *id, void *context);

#endif
