// See include/cxml.h. libxml2_abi.h gives the tree's layout and the option bits; libxml2's
// functions are looked up with dlsym, so that nothing links libxml2.
#include "cxml.h"
#include "libxml2_abi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void (*init_parser)(void);
static struct adc_xmlDoc * (*read_memory)(const char *, int, const char *, const char *, int);
static void (*free_doc)(struct adc_xmlDoc *);
static struct adc_xmlError * (*last_error)(void);
static void (*reset_last_error)(void);
static void (*set_entity_loader)(adc_xmlExternalEntityLoader);
static int loaded;
static char load_error[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

// No external entity, DTD or XInclude is ever read: the loader refuses every one.
static void *refuse_loading(const char *url, const char *id, void *ctxt) {
    (void)url;
    (void)id;
    (void)ctxt;
    return NULL;
}

static void load(void) {
    const char *names[] = {"libxml2.so.2", "libxml2.2.dylib", "libxml2.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "cannot load libxml2 (libxml2.so.2); install the Debian package libxml2");
        return;
    }
    init_parser = (void (*)(void))dlsym(lib, "xmlInitParser");
    read_memory = (struct adc_xmlDoc *(*)(const char *, int, const char *, const char *, int))dlsym(lib, "xmlReadMemory");
    free_doc = (void (*)(struct adc_xmlDoc *))dlsym(lib, "xmlFreeDoc");
    last_error = (struct adc_xmlError *(*)(void))dlsym(lib, "xmlGetLastError");
    reset_last_error = (void (*)(void))dlsym(lib, "xmlResetLastError");
    set_entity_loader = (void (*)(adc_xmlExternalEntityLoader))dlsym(lib, "xmlSetExternalEntityLoader");
    if (!init_parser || !read_memory || !free_doc || !last_error || !reset_last_error || !set_entity_loader) {
        snprintf(load_error, sizeof load_error, "libxml2 lacks what adcache needs (xmlReadMemory)");
        return;
    }
    init_parser();
    set_entity_loader(refuse_loading);
    loaded = 1;
}

int adc_xml_load(char *error, size_t error_size) {
    pthread_once(&once, load);
    if (!loaded) snprintf(error, error_size, "%s", load_error);
    return loaded ? 0 : -1;
}

void *adc_xml_parse(const char *bytes, int length, int *had_doctype, char *error, size_t error_size) {
    *had_doctype = 0;
    if (adc_xml_load(error, error_size) != 0) return NULL;
    reset_last_error();
    // Not ADC_XML_PARSE_NOENT (no substitution), DTDLOAD, DTDATTR or XINCLUDE. ADC_XML_PARSE_HUGE, so
    // that a document under the caller's size cap is not refused for libxml2's own 10 MB
    // text-node limit: the caller's scan of the bytes (XML.swift, XMLReader.prescan) has
    // already refused every DOCTYPE (so no entity can be declared, whose expansion limits
    // HUGE would relax), elements deeper than 256 or with more than 256 attributes, and
    // encodings whose bytes it cannot read as markup.
    int options = ADC_XML_PARSE_NONET | ADC_XML_PARSE_NOERROR | ADC_XML_PARSE_NOWARNING | ADC_XML_PARSE_NOCDATA | ADC_XML_PARSE_HUGE;
    struct adc_xmlDoc * doc = read_memory(bytes, length, "feed.xml", NULL, options);
    if (!doc) {
        struct adc_xmlError * e = last_error();
        if (e && e->message) {
            size_t n = strlen(e->message);
            while (n > 0 && (e->message[n - 1] == '\n' || e->message[n - 1] == ' ')) n--;
            snprintf(error, error_size, "line %d: %.*s", e->line, (int)n, e->message);
        } else {
            snprintf(error, error_size, "not well-formed XML");
        }
        return NULL;
    }
    if (doc->intSubset || doc->extSubset) {
        *had_doctype = 1;
        free_doc(doc);
        snprintf(error, error_size, "it has a DOCTYPE");
        return NULL;
    }
    return doc;
}

void adc_xml_free(void *doc) {
    if (doc && free_doc) free_doc((struct adc_xmlDoc *)doc);
}

void *adc_xml_root(void *doc) {
    for (struct adc_xmlNode * n = ((struct adc_xmlDoc *)doc)->children; n; n = n->next)
        if (n->type == ADC_XML_ELEMENT_NODE) return n;
    return NULL;
}

void *adc_xml_first_child(void *node) { return ((struct adc_xmlNode *)node)->children; }
void *adc_xml_next(void *node) { return ((struct adc_xmlNode *)node)->next; }
int adc_xml_type(void *node) { return (int)((struct adc_xmlNode *)node)->type; }
const char *adc_xml_name(void *node) { return (const char *)((struct adc_xmlNode *)node)->name; }
const char *adc_xml_content(void *node) { return (const char *)((struct adc_xmlNode *)node)->content; }

void *adc_xml_first_attribute(void *node) {
    struct adc_xmlNode * n = (struct adc_xmlNode *)node;
    return n->type == ADC_XML_ELEMENT_NODE ? n->properties : NULL;
}
void *adc_xml_next_attribute(void *attribute) { return ((struct adc_xmlAttr *)attribute)->next; }
const char *adc_xml_attribute_name(void *attribute) { return (const char *)((struct adc_xmlAttr *)attribute)->name; }

size_t adc_xml_attribute_value(void *attribute, char *out, size_t out_size) {
    size_t used = 0;
    for (struct adc_xmlNode * c = ((struct adc_xmlAttr *)attribute)->children; c; c = c->next) {
        if (c->type != ADC_XML_TEXT_NODE || !c->content) continue;
        size_t n = strlen((const char *)c->content);
        if (used + n <= out_size) memcpy(out + used, c->content, n);
        used += n;
    }
    return used;
}
