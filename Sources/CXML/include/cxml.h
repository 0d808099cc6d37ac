// libxml2, loaded with dlopen when a fetch first reads an XML feed (VAST, SPEC §10), never by
// `adcache next`: libxml2 and its dependencies (ICU among them) would cost every launch.
// Its headers are used only by cxml.c; Swift sees this small API over the parsed tree.
#ifndef ADCACHE_CXML_H
#define ADCACHE_CXML_H

#include <stddef.h>

/// Loads libxml2 once; 0 on success, else -1 with the reason in `error`.
int adc_xml_load(char *error, size_t error_size);

/// Parses `length` bytes as XML, with no network, no DTD loaded, no entity substituted and
/// no message printed. NULL on failure, with "line N: reason" in `error`; a document with a
/// DOCTYPE is refused (`*had_doctype` set).
void *adc_xml_parse(const char *bytes, int length, int *had_doctype, char *error, size_t error_size);
void adc_xml_free(void *doc);

void *adc_xml_root(void *doc);
void *adc_xml_first_child(void *node);
void *adc_xml_next(void *node);
/// 1 an element, 3 text, 4 CDATA (libxml2's node types); others are skipped by callers.
int adc_xml_type(void *node);
const char *adc_xml_name(void *node);
/// A text or CDATA node's content.
const char *adc_xml_content(void *node);

void *adc_xml_first_attribute(void *node);
void *adc_xml_next_attribute(void *attribute);
const char *adc_xml_attribute_name(void *attribute);
/// The attribute's value (its text children joined) into `out`: the length needed, which
/// may exceed `out_size` (then call again with more room).
size_t adc_xml_attribute_value(void *attribute, char *out, size_t out_size);

#endif
