/* modules/policy/yaml.c - YAML policy input (`fibril policy import
 * policy.yaml`, as kubectl takes it): libyaml's document loader turned into
 * the json-c tree the parser reads, so YAML and JSON go through exactly the
 * same validation. Several documents ("---") become an array. Depth and
 * node count are bounded (an alias-heavy document cannot blow up). */
#include "policy_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <yaml.h>

#define YAML_MAX_DEPTH 64
#define YAML_MAX_NODES 200000

struct yconv {
	yaml_document_t *doc;
	size_t nodes;
	char *err;
	size_t errlen;
	bool failed;
};

static bool all_digits(const char *s, size_t n)
{
	size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
	if (i == n || n - i > 18)
		return false;
	for (; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

static struct json_object *scalar(yaml_node_t *n)
{
	const char *v = (const char *)n->data.scalar.value;
	size_t len = n->data.scalar.length;
	if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
		if (all_digits(v, len))
			return json_object_new_int64(strtoll(v, NULL, 10));
		if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE"))
			return json_object_new_boolean(1);
		if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE"))
			return json_object_new_boolean(0);
		if (len == 0 || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
		    !strcmp(v, "NULL"))
			return NULL;
	}
	return json_object_new_string_len(v, (int)len);
}

static struct json_object *convert(struct yconv *c, yaml_node_t *n, int depth)
{
	if (c->failed)
		return NULL;
	if (!n || depth > YAML_MAX_DEPTH || ++c->nodes > YAML_MAX_NODES) {
		snprintf(c->err, c->errlen, "YAML: %s",
			 !n ? "a node is missing" : depth > YAML_MAX_DEPTH ? "nested too deeply"
									   : "too many nodes (aliases?)");
		c->failed = true;
		return NULL;
	}
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return scalar(n);
	case YAML_SEQUENCE_NODE: {
		struct json_object *a = json_object_new_array();
		for (yaml_node_item_t *i = n->data.sequence.items.start;
		     i < n->data.sequence.items.top && !c->failed; i++)
			json_object_array_add(a, convert(c, yaml_document_get_node(c->doc, *i), depth + 1));
		return a;
	}
	case YAML_MAPPING_NODE: {
		struct json_object *o = json_object_new_object();
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     p < n->data.mapping.pairs.top && !c->failed; p++) {
			yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
			if (!k || k->type != YAML_SCALAR_NODE) {
				snprintf(c->err, c->errlen, "YAML: line %lu: a mapping key must be a scalar",
					 k ? (unsigned long)k->start_mark.line + 1 : 0ul);
				c->failed = true;
				break;
			}
			json_object_object_add(o, (const char *)k->data.scalar.value,
					       convert(c, yaml_document_get_node(c->doc, p->value),
						       depth + 1));
		}
		return o;
	}
	default:
		snprintf(c->err, c->errlen, "YAML: line %lu: an empty node",
			 (unsigned long)n->start_mark.line + 1);
		c->failed = true;
		return NULL;
	}
}

struct json_object *pol_yaml_to_json(const char *text, size_t len, char *err, size_t errlen)
{
	yaml_parser_t parser;
	struct json_object *docs = json_object_new_array();
	if (!docs || !yaml_parser_initialize(&parser)) {
		snprintf(err, errlen, "out of memory");
		json_object_put(docs);
		return NULL;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	for (;;) {
		yaml_document_t doc;
		if (!yaml_parser_load(&parser, &doc)) {
			snprintf(err, errlen, "not valid YAML (line %lu: %s)",
				 (unsigned long)parser.problem_mark.line + 1,
				 parser.problem ? parser.problem : "syntax error");
			for (char *p = err; *p; p++)
				if ((unsigned char)*p < 0x20)
					*p = '?';
			json_object_put(docs);
			docs = NULL;
			break;
		}
		yaml_node_t *root = yaml_document_get_root_node(&doc);
		if (!root) { /* the end of the stream */
			yaml_document_delete(&doc);
			break;
		}
		struct yconv c = {.doc = &doc, .err = err, .errlen = errlen};
		struct json_object *o = convert(&c, root, 0);
		yaml_document_delete(&doc);
		if (c.failed) {
			json_object_put(o);
			json_object_put(docs);
			docs = NULL;
			break;
		}
		if (o) /* an empty document ("---" alone) adds nothing */
			json_object_array_add(docs, o);
	}
	yaml_parser_delete(&parser);
	if (!docs)
		return NULL;
	if (json_object_array_length(docs) == 1) {
		struct json_object *one = json_object_get(json_object_array_get_idx(docs, 0));
		json_object_put(docs);
		return one;
	}
	return docs;
}
