/*
 * orbitmq._native: the per-message work of a send, in C.
 *
 * A batched send is 128 messages whose bytes go from the gRPC request to the commit log.
 * Doing that in Python costs a protobuf wrapper, a properties dict, an encoded properties
 * string, a CRC call and a header pack per message: about 700 us a batch, most of a broker
 * core. Here the same work is two passes over the request bytes:
 *
 *   scan()   walks the SendMessageRequest wire format, checks every message and returns the
 *            columns the broker still needs in Python (index keys) plus a compact layout of
 *            where each message's parts are in the request, with its tag code;
 *   write()  builds the records of DESIGN's commit-log format from that layout, writes them
 *            to the segment file with one pwrite without holding the GIL, and returns their
 *            consume-queue units, so the dispatcher copies them as they are.
 *
 * Everything unusual (a delayed or transactional message, a separator inside a property,
 * a duplicate map key, an odd wire shape) is not handled here: scan() names the reason and the
 * caller takes the Python path, which is the reference for every rule and every refusal.
 * Field numbers and the record layout are fixed below; orbitmq/native.py checks them against
 * the generated protobuf descriptors and record.py before it lets anything use this module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* -- wire and record constants (checked from Python, see native.py) ------------------------ */

#define REQUEST_PRODUCER_GROUP 1 /* SendMessageRequest fields */
#define REQUEST_TOPIC 2
#define REQUEST_QUEUE_ID 3
#define REQUEST_MESSAGES 4
#define REQUEST_BORN_TIMESTAMP 5
#define REQUEST_BORN_HOST 6
#define REQUEST_SYS_FLAG 7
#define REQUEST_RECONSUME_TIMES 8
#define REQUEST_DEFAULT_QUEUE_NUMS 9
#define MESSAGE_TOPIC 1    /* Message.topic */
#define MESSAGE_BODY 2     /* Message.body */
#define MESSAGE_PROPS 3    /* Message.properties (map entries: key = 1, value = 2) */
#define MESSAGE_FLAG 4     /* Message.flag */
#define MESSAGE_BORN_HOST 5 /* Message.born_host: a per-message born host, stored by the Python path */

#define MESSAGE_MAGIC 0xDAA320A7u
#define HEADER_BYTES 112
#define SHARED_POS 36 /* sys_flag .. prepared transaction offset: the same for a whole send */
#define SHARED_BYTES 72
#define MAX_ENTRIES 64 /* more properties than this: the Python path */
#define UNIT_BYTES 20  /* consume-queue unit: physical offset i64, size i32, tag code i64 */

/* -- CRC-32C ------------------------------------------------------------------------------- */

static uint32_t crc_table[8][256];
static int crc_hardware;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hardware = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

static uint32_t crc_software(uint32_t crc, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
              crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

/* CRC-32C (Castagnoli) of p[0..n), continuing from `value` (0 to start): the `crc32c` package's. */
static uint32_t crc32c(uint32_t value, const uint8_t *p, size_t n) {
    uint32_t crc = ~value;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hardware)
        return ~crc_sse42(crc, p, n);
#endif
    return ~crc_software(crc, p, n);
}

/* -- CRC-32 (zlib's): the consume queue's tag code ----------------------------------------- */

static uint32_t tag_crc_table[256];

static void tag_crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        tag_crc_table[i] = c;
    }
}

/* record.tags_code: zlib.crc32 of the tag's UTF-8 bytes (0 for no tag or an empty one). */
static uint32_t tag_code(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    while (n--)
        crc = (crc >> 8) ^ tag_crc_table[(crc ^ *p++) & 0xFF];
    return ~crc;
}

/* -- protobuf wire format ------------------------------------------------------------------ */

enum { VARINT = 0, I64 = 1, LEN = 2, I32 = 5 };

static int read_varint(const uint8_t **at, const uint8_t *end, uint64_t *out) {
    uint64_t value = 0;
    const uint8_t *p = *at;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t byte = *p++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *at = p;
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* One field: its number and wire type; for LEN fields the payload, for VARINT the value.
 * Returns 0, or -1 for bytes that are not a field (or a wire type this scanner does not take). */
typedef struct {
    uint32_t number;
    int type;
    const uint8_t *data;
    size_t len;
    uint64_t value;
} Field;

static int next_field(const uint8_t **at, const uint8_t *end, Field *f) {
    uint64_t tag;
    if (read_varint(at, end, &tag) < 0 || tag >> 3 == 0 || tag >> 3 > 0x1FFFFFFF)
        return -1;
    f->number = (uint32_t)(tag >> 3);
    f->type = (int)(tag & 7);
    switch (f->type) {
    case VARINT:
        return read_varint(at, end, &f->value);
    case I64:
    case I32: {
        size_t width = f->type == I64 ? 8 : 4;
        if ((size_t)(end - *at) < width)
            return -1;
        *at += width;
        return 0;
    }
    case LEN: {
        uint64_t len;
        if (read_varint(at, end, &len) < 0 || len > (uint64_t)(end - *at))
            return -1;
        f->data = *at;
        f->len = (size_t)len;
        *at += len;
        return 0;
    }
    default: /* groups: never in orbitmq's protos */
        return -1;
    }
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): what protobuf's
 * parser requires of string fields, checked here because the C path never runs that parser. */
static int valid_utf8(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    while (p < end) {
        if (end - p >= 8) {
            uint64_t block;
            memcpy(&block, p, 8);
            if (!(block & 0x8080808080808080ull)) {
                p += 8;
                continue;
            }
        }
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t more;
        uint8_t low = 0x80, high = 0xBF; /* range of the first continuation byte */
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c == 0xE0)
            more = 2, low = 0xA0;
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
            more = 2;
        else if (c == 0xED)
            more = 2, high = 0x9F;
        else if (c == 0xF0)
            more = 3, low = 0x90;
        else if (c >= 0xF1 && c <= 0xF3)
            more = 3;
        else if (c == 0xF4)
            more = 3, high = 0x8F;
        else
            return 0;
        if ((size_t)(end - p) <= more || p[1] < low || p[1] > high)
            return 0;
        for (size_t i = 2; i <= more; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += more + 1;
    }
    return 1;
}

/* -- scan ---------------------------------------------------------------------------------- */

/* Where one message's parts are in the request: what write() needs, in scan()'s result. */
typedef struct {
    uint32_t message_off, message_len; /* the Message's own bytes */
    uint32_t body_off, body_len;
    uint32_t properties_len; /* encoded: name \x01 value \x02 per entry */
    int32_t flag;
    uint32_t tag_code; /* of the TAGS property: the consume-queue unit's third field */
} Layout;

typedef struct {
    const uint8_t *key, *value;
    size_t key_len, value_len;
} Entry;

typedef struct {
    const char *reason; /* why the Python path must take this request; NULL when it need not */
    Py_ssize_t count;
    uint64_t payload; /* bodies plus encoded properties */
    uint32_t body_max, properties_max;
} ScanTotals;

typedef struct {
    /* names compared against property keys, passed by the caller */
    Py_buffer tags, keys, uniq;
    Py_buffer *detour;
    Py_ssize_t detour_count;
} Names;

static int same(const uint8_t *p, size_t n, const Py_buffer *name) {
    return (Py_ssize_t)n == name->len && memcmp(p, name->buf, n) == 0;
}

/* Reads a map entry; returns the reason it cannot be taken, or NULL. */
static const char *read_entry(const Field *f, Entry *e) {
    const uint8_t *p = f->data, *end = f->data + f->len;
    int seen_key = 0, seen_value = 0;
    e->key = e->value = (const uint8_t *)"";
    e->key_len = e->value_len = 0;
    while (p < end) {
        Field g;
        if (next_field(&p, end, &g) < 0)
            return "wire";
        /* Anything but one key and one value: protobuf's parser moves such an entry to the
         * message's unknown fields, which only the Python path mirrors. */
        if ((g.number != 1 && g.number != 2) || g.type != LEN || (g.number == 1 ? seen_key++ : seen_value++))
            return "wire";
        if (g.number == 1) {
            e->key = g.data;
            e->key_len = g.len;
        } else {
            e->value = g.data;
            e->value_len = g.len;
        }
    }
    if (e->key_len == 0)
        return "separator"; /* an empty name: the Python path refuses it with the reason */
    if (memchr(e->key, 1, e->key_len) || memchr(e->key, 2, e->key_len) || memchr(e->value, 1, e->value_len) ||
        memchr(e->value, 2, e->value_len))
        return "separator";
    if (!valid_utf8(e->key, e->key_len) || !valid_utf8(e->value, e->value_len))
        return "utf-8";
    return NULL;
}

static PyObject *text(const Entry *e) {
    return PyUnicode_DecodeUTF8((const char *)e->value, (Py_ssize_t)e->value_len, "strict");
}

/* A value that is not UTF-8 (protobuf's own parser refuses those first): the Python path. */
static const char *not_text(void) {
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return (const char *)-1;
    PyErr_Clear();
    return "utf-8";
}

/* One Message: checks it, fills its layout (with its tag code), appends its index entry (if any).
 * Returns the reason to leave the request to Python, NULL when taken, or (const char *)-1 with
 * a Python exception set. */
static const char *scan_message(const uint8_t *base, const Field *m, const Field *topic, const Names *names,
                                Layout *out, PyObject **indexed, Py_ssize_t index) {
    const uint8_t *p = m->data, *end = m->data + m->len;
    Entry entries[MAX_ENTRIES];
    int count = 0, seen_topic = 0, seen_body = 0, seen_flag = 0;
    const Entry *tag = NULL, *keys = NULL, *uniq = NULL;
    memset(out, 0, sizeof *out);
    out->message_off = (uint32_t)(m->data - base);
    out->message_len = (uint32_t)m->len;
    while (p < end) {
        Field f;
        if (next_field(&p, end, &f) < 0)
            return "wire";
        switch (f.number) {
        case MESSAGE_TOPIC:
            if (f.type != LEN || seen_topic++)
                return "wire";
            if (f.len && !(f.len == topic->len && memcmp(f.data, topic->data, f.len) == 0))
                return "topic";
            break;
        case MESSAGE_BODY:
            if (f.type != LEN || seen_body++)
                return "wire";
            out->body_off = (uint32_t)(f.data - base);
            out->body_len = (uint32_t)f.len;
            break;
        case MESSAGE_PROPS: {
            if (f.type != LEN)
                return "wire";
            if (count == MAX_ENTRIES)
                return "properties";
            Entry *e = &entries[count];
            const char *reason = read_entry(&f, e);
            if (reason)
                return reason;
            for (int i = 0; i < count; i++)
                if (entries[i].key_len == e->key_len && memcmp(entries[i].key, e->key, e->key_len) == 0)
                    return "duplicate";
            for (Py_ssize_t d = 0; d < names->detour_count; d++)
                if (same(e->key, e->key_len, &names->detour[d]))
                    return "detour";
            if (same(e->key, e->key_len, &names->tags))
                tag = e;
            else if (same(e->key, e->key_len, &names->keys))
                keys = e;
            else if (same(e->key, e->key_len, &names->uniq))
                uniq = e;
            out->properties_len += (uint32_t)(e->key_len + e->value_len + 2);
            count++;
            break;
        }
        case MESSAGE_FLAG:
            if (f.type != VARINT || seen_flag++)
                return "wire";
            out->flag = (int32_t)(uint32_t)f.value; /* int32 on the wire: sign-extended varint */
            break;
        case MESSAGE_BORN_HOST: /* the records here take the request's born host: not this one */
            return "born_host";
        default: /* a field this broker does not know: ignored, as protobuf ignores it */
            break;
        }
    }
    if (tag != NULL)
        out->tag_code = tag_code(tag->value, tag->value_len);
    if (keys || uniq) {
        if (*indexed == NULL && (*indexed = PyList_New(0)) == NULL)
            return (const char *)-1;
        PyObject *item = PyTuple_New(3);
        if (item == NULL)
            return (const char *)-1;
        PyTuple_SET_ITEM(item, 0, PyLong_FromSsize_t(index));
        PyTuple_SET_ITEM(item, 1, keys ? text(keys) : Py_NewRef(Py_None));
        PyTuple_SET_ITEM(item, 2, uniq ? text(uniq) : Py_NewRef(Py_None));
        for (int i = 0; i < 3; i++) {
            if (PyTuple_GET_ITEM(item, i) == NULL) {
                Py_DECREF(item);
                return i ? not_text() : (const char *)-1;
            }
        }
        int failed = PyList_Append(*indexed, item);
        Py_DECREF(item);
        if (failed)
            return (const char *)-1;
    }
    return NULL;
}

static int names_from(PyObject *const *args, Names *names, PyObject **detour_seq) {
    memset(names, 0, sizeof *names);
    if (PyObject_GetBuffer(args[0], &names->tags, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(args[1], &names->keys, PyBUF_SIMPLE) < 0)
        goto fail_tags;
    if (PyObject_GetBuffer(args[2], &names->uniq, PyBUF_SIMPLE) < 0)
        goto fail_keys;
    *detour_seq = PySequence_Fast(args[3], "detour names must be a sequence of bytes");
    if (*detour_seq == NULL)
        goto fail_uniq;
    names->detour_count = PySequence_Fast_GET_SIZE(*detour_seq);
    names->detour = PyMem_Calloc((size_t)names->detour_count + 1, sizeof(Py_buffer));
    if (names->detour == NULL) {
        PyErr_NoMemory();
        goto fail_seq;
    }
    for (Py_ssize_t i = 0; i < names->detour_count; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(*detour_seq, i), &names->detour[i], PyBUF_SIMPLE) < 0) {
            while (i--)
                PyBuffer_Release(&names->detour[i]);
            PyMem_Free(names->detour);
            goto fail_seq;
        }
    }
    return 0;
fail_seq:
    Py_CLEAR(*detour_seq);
fail_uniq:
    PyBuffer_Release(&names->uniq);
fail_keys:
    PyBuffer_Release(&names->keys);
fail_tags:
    PyBuffer_Release(&names->tags);
    return -1;
}

static void names_release(Names *names, PyObject *detour_seq) {
    for (Py_ssize_t i = 0; i < names->detour_count; i++)
        PyBuffer_Release(&names->detour[i]);
    PyMem_Free(names->detour);
    Py_XDECREF(detour_seq);
    PyBuffer_Release(&names->uniq);
    PyBuffer_Release(&names->keys);
    PyBuffer_Release(&names->tags);
}

PyDoc_STRVAR(scan_doc,
             "scan(request, tags_name, keys_name, uniq_name, detour_names)\n--\n\n"
             "Scan a SendMessageRequest's bytes. Returns a str naming why the Python path must take\n"
             "the request, or a Scanned(header, columns): header a SendHeader(producer_group, topic,\n"
             "queue_id, born_timestamp_ms, born_host, sys_flag, reconsume_times,\n"
             "default_topic_queue_nums); columns a ScanColumns(layout, count, payload_bytes, body_max,\n"
             "properties_max, indexed). layout: for write(), with each message's tag code; indexed:\n"
             "None or a list of (index, KEYS value or None, UNIQ_KEY value or None) for the messages\n"
             "that carry either.");

/* The request's own fields, read as protobuf reads them: the last occurrence wins. */
typedef struct {
    Field producer_group, topic, born_host;
    int64_t born_timestamp;
    int32_t queue_id, sys_flag, reconsume_times, default_queue_nums;
} Header;

/* First pass: the header fields and the number of messages; the reason to refuse, or NULL. */
static const char *read_header(const uint8_t *p, const uint8_t *end, Header *h, Py_ssize_t *count) {
    static const uint8_t empty[1] = {0};
    memset(h, 0, sizeof *h);
    h->producer_group.data = h->topic.data = h->born_host.data = empty;
    while (p < end) {
        Field f;
        if (next_field(&p, end, &f) < 0)
            return "wire";
        int want = f.number == REQUEST_PRODUCER_GROUP || f.number == REQUEST_TOPIC || f.number == REQUEST_BORN_HOST ||
                           f.number == REQUEST_MESSAGES
                       ? LEN
                   : f.number <= REQUEST_DEFAULT_QUEUE_NUMS ? VARINT
                                                            : -1;
        if (want >= 0 && f.type != want)
            return "wire";
        switch (f.number) {
        case REQUEST_PRODUCER_GROUP:
            h->producer_group = f;
            break;
        case REQUEST_TOPIC:
            h->topic = f;
            break;
        case REQUEST_BORN_HOST:
            h->born_host = f;
            break;
        case REQUEST_MESSAGES:
            (*count)++;
            break;
        case REQUEST_QUEUE_ID:
            h->queue_id = (int32_t)(uint32_t)f.value;
            break;
        case REQUEST_BORN_TIMESTAMP:
            h->born_timestamp = (int64_t)f.value;
            break;
        case REQUEST_SYS_FLAG:
            h->sys_flag = (int32_t)(uint32_t)f.value;
            break;
        case REQUEST_RECONSUME_TIMES:
            h->reconsume_times = (int32_t)(uint32_t)f.value;
            break;
        case REQUEST_DEFAULT_QUEUE_NUMS:
            h->default_queue_nums = (int32_t)(uint32_t)f.value;
            break;
        default: /* unknown: skipped, as protobuf skips it */
            break;
        }
    }
    if (!valid_utf8(h->producer_group.data, h->producer_group.len) || !valid_utf8(h->topic.data, h->topic.len) ||
        !valid_utf8(h->born_host.data, h->born_host.len))
        return "utf-8";
    return *count ? NULL : "empty";
}

/* scan()'s results are struct sequences (named tuples made in C): building a Python
 * NamedTuple costs a Python-level call each, a few of a send's microseconds. native.py checks
 * that their field names are those of its NamedTuples, which document them. */
static PyStructSequence_Field header_fields[] = {
    {"producer_group", NULL}, {"topic", NULL},   {"queue_id", NULL},        {"born_timestamp_ms", NULL},
    {"born_host", NULL},      {"sys_flag", NULL}, {"reconsume_times", NULL}, {"default_topic_queue_nums", NULL},
    {NULL, NULL},
};
static PyStructSequence_Field columns_fields[] = {
    {"layout", NULL},         {"count", NULL},   {"payload_bytes", NULL}, {"body_max", NULL},
    {"properties_max", NULL}, {"indexed", NULL}, {NULL, NULL},
};
static PyStructSequence_Field scanned_fields[] = {{"header", NULL}, {"columns", NULL}, {NULL, NULL}};
static PyStructSequence_Desc header_desc = {"orbitmq._native.SendHeader", "A SendMessageRequest's own fields.",
                                            header_fields, 8};
static PyStructSequence_Desc columns_desc = {"orbitmq._native.ScanColumns", "What scan() read from the messages.",
                                             columns_fields, 6};
static PyStructSequence_Desc scanned_desc = {"orbitmq._native.Scanned", "scan()'s result for a request it takes.",
                                             scanned_fields, 2};
static PyTypeObject *header_type, *columns_type, *scanned_type;

/* A struct sequence of `type` holding the items of `values` (a new tuple, consumed). */
static PyObject *as_struct(PyTypeObject *type, PyObject *values) {
    if (values == NULL)
        return NULL;
    PyObject *result = PyStructSequence_New(type);
    if (result != NULL)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(values); i++)
            PyStructSequence_SET_ITEM(result, i, Py_NewRef(PyTuple_GET_ITEM(values, i)));
    Py_DECREF(values);
    return result;
}

static PyObject *header_struct(const Header *h) {
    return as_struct(header_type,
                     Py_BuildValue("(s#s#iLs#iii)", (const char *)h->producer_group.data,
                                   (Py_ssize_t)h->producer_group.len, (const char *)h->topic.data,
                                   (Py_ssize_t)h->topic.len, h->queue_id, (long long)h->born_timestamp,
                                   (const char *)h->born_host.data, (Py_ssize_t)h->born_host.len, h->sys_flag,
                                   h->reconsume_times, h->default_queue_nums));
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "scan() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer raw;
    Names names;
    PyObject *detour_seq = NULL, *layout = NULL, *indexed = NULL, *header = NULL;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &raw, PyBUF_SIMPLE) < 0)
        return NULL;
    if (names_from(args + 1, &names, &detour_seq) < 0) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    const uint8_t *base = raw.buf, *end = base + raw.len, *p;
    ScanTotals totals = {NULL, 0, 0, 0, 0};
    Header h;
    if (raw.len > 0x7FFFFFFF) {
        totals.reason = "size";
        goto done;
    }
    totals.reason = read_header(base, end, &h, &totals.count);
    if (totals.reason)
        goto done;
    layout = PyBytes_FromStringAndSize(NULL, totals.count * (Py_ssize_t)sizeof(Layout));
    if (layout == NULL)
        goto error;
    Layout *entry = (Layout *)PyBytes_AS_STRING(layout);
    Py_ssize_t index = 0;
    for (p = base; p < end;) {
        Field f;
        next_field(&p, end, &f); /* cannot fail: the first pass read the same bytes */
        if (f.number != REQUEST_MESSAGES)
            continue;
        const char *reason = scan_message(base, &f, &h.topic, &names, &entry[index], &indexed, index);
        if (reason == (const char *)-1)
            goto error;
        if (reason) {
            totals.reason = reason;
            goto done;
        }
        Layout *l = &entry[index];
        totals.payload += (uint64_t)l->body_len + l->properties_len;
        if (l->body_len > totals.body_max)
            totals.body_max = l->body_len;
        if (l->properties_len > totals.properties_max)
            totals.properties_max = l->properties_len;
        index++;
    }
    header = header_struct(&h);
    if (header == NULL)
        goto error;
done:
    if (totals.reason)
        result = PyUnicode_FromString(totals.reason);
    else {
        PyObject *columns =
            as_struct(columns_type, Py_BuildValue("(OnKIIO)", layout, totals.count, (unsigned long long)totals.payload,
                                                  totals.body_max, totals.properties_max, indexed ? indexed : Py_None));
        if (columns != NULL)
            result = as_struct(scanned_type, Py_BuildValue("(OO)", header, columns));
        Py_XDECREF(columns);
    }
error:
    Py_XDECREF(header);
    Py_XDECREF(layout);
    Py_XDECREF(indexed);
    names_release(&names, detour_seq);
    PyBuffer_Release(&raw);
    return result;
}

/* -- write --------------------------------------------------------------------------------- */

static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* Encodes one message's properties at `out` (name \x01 value \x02 ...), in wire order. */
static uint8_t *put_properties(const uint8_t *base, const Layout *l, uint8_t *out) {
    const uint8_t *p = base + l->message_off, *end = p + l->message_len;
    while (p < end) {
        Field f;
        next_field(&p, end, &f); /* scan() read these bytes already */
        if (f.number != MESSAGE_PROPS)
            continue;
        Entry e;
        read_entry(&f, &e);
        memcpy(out, e.key, e.key_len);
        out += e.key_len;
        *out++ = 1;
        memcpy(out, e.value, e.value_len);
        out += e.value_len;
        *out++ = 2;
    }
    return out;
}

#define RELEASE_GIL_BYTES (64 * 1024)

/* pwrite all of buffer[0..total) at `position`; 0 or the errno. */
static int write_all(int fd, const uint8_t *buffer, size_t total, long long position) {
    size_t done = 0;
    while (done < total) {
        ssize_t n = pwrite(fd, buffer + done, total - done, (off_t)(position + (long long)done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        done += (size_t)n;
    }
    return 0;
}

PyDoc_STRVAR(write_doc,
             "write(request, layout, fd, file_position, topic, shared, queue_id, queue_offset,\n"
             "      queue_offset_step, physical_offset)\n--\n\n"
             "Write the records of a scanned request to ``fd`` at ``file_position`` (one pwrite; the\n"
             "GIL is released for 64 KiB or more). topic: its UTF-8 bytes; shared: header bytes\n"
             "36..108. Record i\n"
             "gets queue offset queue_offset + i * queue_offset_step and the physical offset after\n"
             "record i - 1. Returns (sizes, units): the records' sizes, and their consume-queue units\n"
             "(physical offset, size, tag code; 20 bytes each, big-endian) for the dispatcher.");

static PyObject *write_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "write() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[2]);
    long long file_position = PyLong_AsLongLong(args[3]);
    long queue_id = PyLong_AsLong(args[6]);
    long long queue_offset = PyLong_AsLongLong(args[7]);
    long long step = PyLong_AsLongLong(args[8]);
    long long physical = PyLong_AsLongLong(args[9]);
    if (PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX || queue_id < INT32_MIN || queue_id > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "write(): fd and queue id must fit in 32 bits");
        return NULL;
    }
    if (file_position < 0 || physical < 0 || queue_offset < 0) {
        PyErr_SetString(PyExc_ValueError, "file position, queue offset and physical offset must not be negative");
        return NULL;
    }
    Py_buffer raw, layout, topic, shared;
    PyObject *sizes = NULL, *units = NULL, *result = NULL;
    uint8_t *out = NULL;
    if (PyObject_GetBuffer(args[0], &raw, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &layout, PyBUF_SIMPLE) < 0)
        goto release_raw;
    if (PyObject_GetBuffer(args[4], &topic, PyBUF_SIMPLE) < 0)
        goto release_layout;
    if (PyObject_GetBuffer(args[5], &shared, PyBUF_SIMPLE) < 0)
        goto release_topic;
    if (shared.len != SHARED_BYTES || topic.len > 0xFFFF || layout.len % (Py_ssize_t)sizeof(Layout)) {
        PyErr_SetString(PyExc_ValueError, "write(): shared fields, topic or layout have the wrong size");
        goto release_all;
    }
    Py_ssize_t count = layout.len / (Py_ssize_t)sizeof(Layout);
    const Layout *entries = layout.buf;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const Layout *l = &entries[i];
        if ((uint64_t)l->message_off + l->message_len > (uint64_t)raw.len ||
            (uint64_t)l->body_off + l->body_len > (uint64_t)raw.len) {
            PyErr_SetString(PyExc_ValueError, "write(): the layout does not belong to this request");
            goto release_all;
        }
        total += HEADER_BYTES + l->body_len + 2 + (size_t)topic.len + 2 + l->properties_len;
    }
    sizes = PyList_New(count);
    units = PyBytes_FromStringAndSize(NULL, count * UNIT_BYTES);
    out = PyMem_RawMalloc(total ? total : 1);
    if (sizes == NULL || units == NULL || out == NULL) {
        if (out == NULL)
            PyErr_NoMemory();
        goto release_all;
    }
    const uint8_t *base = raw.buf;
    uint8_t *at = out, *unit = (uint8_t *)PyBytes_AS_STRING(units);
    for (Py_ssize_t i = 0; i < count; i++) {
        const Layout *l = &entries[i];
        uint8_t *record = at;
        const uint8_t *body = base + l->body_off;
        uint32_t size = HEADER_BYTES + l->body_len + 2 + (uint32_t)topic.len + 2 + l->properties_len;
        put32(at, size);
        put32(at + 4, MESSAGE_MAGIC);
        put32(at + 8, crc32c(0, body, l->body_len));
        put32(at + 12, (uint32_t)queue_id);
        put32(at + 16, (uint32_t)l->flag);
        put64(at + 20, (uint64_t)(queue_offset + i * step));
        put64(at + 28, (uint64_t)physical);
        memcpy(at + SHARED_POS, shared.buf, SHARED_BYTES);
        put32(at + 108, l->body_len);
        at += HEADER_BYTES;
        memcpy(at, body, l->body_len);
        at += l->body_len;
        at[0] = (uint8_t)(topic.len >> 8);
        at[1] = (uint8_t)topic.len;
        memcpy(at + 2, topic.buf, (size_t)topic.len);
        at += 2 + topic.len;
        at[0] = (uint8_t)(l->properties_len >> 8);
        at[1] = (uint8_t)l->properties_len;
        at = put_properties(base, l, at + 2);
        if ((size_t)(at - record) != size) { /* scan() and write() disagree: never write that */
            PyErr_SetString(PyExc_RuntimeError, "write(): encoded record size differs from the scanned size");
            goto release_all;
        }
        PyList_SET_ITEM(sizes, i, PyLong_FromUnsignedLong(size));
        put64(unit, (uint64_t)physical);
        put32(unit + 8, size);
        put64(unit + 12, l->tag_code);
        unit += UNIT_BYTES;
        physical += size;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (PyList_GET_ITEM(sizes, i) == NULL)
            goto release_all;
    /* A small write (the usual single send) keeps the GIL: releasing it hands the GIL to the
     * gRPC poller thread, and taking it back costs two context switches, more than the copy
     * into the page cache. A big one lets the other threads run meanwhile. */
    int error;
    if (total < RELEASE_GIL_BYTES) {
        error = write_all((int)fd, out, total, file_position);
    } else {
        Py_BEGIN_ALLOW_THREADS;
        error = write_all((int)fd, out, total, file_position);
        Py_END_ALLOW_THREADS;
    }
    if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        result = PyTuple_Pack(2, sizes, units);
    }
release_all:
    Py_XDECREF(sizes);
    Py_XDECREF(units);
    PyMem_RawFree(out);
    PyBuffer_Release(&shared);
release_topic:
    PyBuffer_Release(&topic);
release_layout:
    PyBuffer_Release(&layout);
release_raw:
    PyBuffer_Release(&raw);
    return result;
}

/* -- read --------------------------------------------------------------------------------- */

static inline int64_t get64(const uint8_t *p) {
    return (int64_t)((uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 | (uint64_t)p[3] << 32 |
                     (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 | (uint64_t)p[6] << 8 | (uint64_t)p[7]);
}

PyDoc_STRVAR(read_records_doc,
             "read_records(segment, segment_start, segment_end, units, count_left, bytes_left, have_records,\n"
             "             min_physical, records)\n--\n\n"
             "A pull's inner loop: for each consume-queue unit in ``units`` (raw, 20 bytes each), append\n"
             "its record, sliced from ``segment`` (the mapping of the commit-log segment starting at\n"
             "``segment_start``), to ``records``. Stops before a unit that would exceed ``count_left``\n"
             "records or ``bytes_left`` bytes (the first record of a pull always fits), and at a unit\n"
             "the caller must look at itself (outside [segment_start, segment_end), below\n"
             "``min_physical``, or of no size). Returns (units consumed, bytes added, physical offset\n"
             "of the last record, stop): stop 0 = units exhausted, 1 = pull full, 2 = caller's unit.");

static PyObject *read_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyList_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "read_records() takes 9 arguments, the last a list");
        return NULL;
    }
    long long segment_start = PyLong_AsLongLong(args[1]), segment_end = PyLong_AsLongLong(args[2]);
    Py_ssize_t count_left = PyLong_AsSsize_t(args[4]);
    long long bytes_left = PyLong_AsLongLong(args[5]);
    int have = PyObject_IsTrue(args[6]);
    long long min_physical = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer segment, units;
    if (PyObject_GetBuffer(args[0], &segment, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[3], &units, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&segment);
        return NULL;
    }
    PyObject *records = args[8];
    const uint8_t *u = units.buf;
    Py_ssize_t total_units = units.len / UNIT_BYTES, consumed = 0;
    long long added = 0, last_physical = 0;
    int stop = 0, failed = 0;
    if (segment_end - segment_start > segment.len)
        segment_end = segment_start + segment.len;
    for (; consumed < total_units; consumed++, u += UNIT_BYTES) {
        long long physical = get64(u);
        int32_t size = (int32_t)((uint32_t)u[8] << 24 | (uint32_t)u[9] << 16 | (uint32_t)u[10] << 8 | u[11]);
        if (count_left == 0 || ((have || added) && size > bytes_left - added)) {
            stop = 1;
            break;
        }
        if (size <= 0 || physical < min_physical || physical < segment_start || physical > segment_end - size) {
            stop = 2;
            break;
        }
        PyObject *record = PyBytes_FromStringAndSize((const char *)segment.buf + (physical - segment_start), size);
        if (record == NULL || PyList_Append(records, record) < 0) {
            Py_XDECREF(record);
            failed = 1;
            break;
        }
        Py_DECREF(record);
        count_left--;
        added += size;
        last_physical = physical;
    }
    PyBuffer_Release(&units);
    PyBuffer_Release(&segment);
    if (failed)
        return NULL;
    return Py_BuildValue("(nLLi)", consumed, added, last_physical, stop);
}

/* -- offset message ids -------------------------------------------------------------------- */

PyDoc_STRVAR(offset_ids_doc,
             "offset_ids(prefix, first_offset, sizes)\n--\n\n"
             "The offset message ids of records laid back to back from ``first_offset``: ``prefix``\n"
             "(the store host's hex, ASCII) followed by each record's offset as 16 uppercase hex digits.");

static PyObject *offset_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyUnicode_IS_ASCII(args[0]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "offset_ids() takes an ASCII prefix, an offset and a list of sizes");
        return NULL;
    }
    long long offset = PyLong_AsLongLong(args[1]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "offset_ids(): the first offset must not be negative");
        return NULL;
    }
    Py_ssize_t prefix_len = PyUnicode_GET_LENGTH(args[0]), count = PyList_GET_SIZE(args[2]);
    const char *prefix = (const char *)PyUnicode_DATA(args[0]);
    static const char digits[] = "0123456789ABCDEF";
    PyObject *ids = PyList_New(count);
    if (ids == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *id = PyUnicode_New(prefix_len + 16, 127);
        if (id == NULL) {
            Py_DECREF(ids);
            return NULL;
        }
        char *out = (char *)PyUnicode_DATA(id);
        memcpy(out, prefix, (size_t)prefix_len);
        for (int d = 0; d < 16; d++)
            out[prefix_len + d] = digits[((unsigned long long)offset >> (60 - 4 * d)) & 0xF];
        PyList_SET_ITEM(ids, i, id);
        long long size = PyLong_AsLongLong(PyList_GET_ITEM(args[2], i));
        if (size == -1 && PyErr_Occurred()) {
            Py_DECREF(ids);
            return NULL;
        }
        offset += size;
    }
    return ids;
}

/* -- the message index: a batch's key entries ---------------------------------------------- */

/* orbitmq/store/index_file.py's layout: a slot is a big-endian i32 (the newest entry's 1-based
   number), an entry is key hash u32, physical offset i64, time delta i32, previous entry i32. */
#define INDEX_SLOT_BYTES 4
#define INDEX_ENTRY_BYTES 20
#define INDEX_MAX_KEYS 64 /* more distinct keys in one message: the Python path */

typedef struct {
    const char *p;
    Py_ssize_t n;
} Key;

/* Appends p[0:n] to keys[0:count] unless empty or already there; the new count, or -1 when full. */
static int add_key(Key *keys, int count, const char *p, Py_ssize_t n) {
    if (n == 0)
        return count;
    for (int j = 0; j < count; j++)
        if (keys[j].n == n && memcmp(keys[j].p, p, (size_t)n) == 0)
            return count;
    if (count == INDEX_MAX_KEYS)
        return -1;
    keys[count].p = p;
    keys[count].n = n;
    return count + 1;
}

/* A message's keys as index_file._message_keys gives them: the KEYS value's pieces between
   spaces, then the unique key, each once, in order of first appearance. -1: too many. */
static int message_keys(const char *raw, Py_ssize_t raw_n, const char *unique, Py_ssize_t unique_n, Key *keys) {
    int count = 0;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i <= raw_n && count >= 0; i++)
        if (i == raw_n || raw[i] == ' ') {
            count = add_key(keys, count, raw + start, i - start);
            start = i + 1;
        }
    return count < 0 ? -1 : add_key(keys, count, unique, unique_n);
}

/* The UTF-8 of an optional str (None: empty). */
static int key_text(PyObject *o, const char **p, Py_ssize_t *n) {
    *p = "";
    *n = 0;
    if (o == Py_None)
        return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "index_put(): keys and unique keys must be str or None");
        return -1;
    }
    return (*p = PyUnicode_AsUTF8AndSize(o, n)) == NULL ? -1 : 0;
}

static inline uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

PyDoc_STRVAR(index_put_doc,
             "index_put(mapping, slots_start, slot_count, entries_start, max_entries, entry_count,\n"
             "          used_slots, delta_s, prefix, indexed, offsets, start, indexed_end)\n--\n\n"
             "Index entries for a batch's keyed messages in one index file's ``mapping`` (writable),\n"
             "as IndexFile.put would write them key by key, header aside (the caller writes it).\n"
             "``indexed`` holds (i, keys, unique_key) per keyed message, from position ``start`` on;\n"
             "message i is at physical offset ``offsets[i]``; its keys hash as ``prefix`` + key (zlib\n"
             "CRC-32) and all get ``delta_s``. Messages below ``indexed_end`` are skipped (indexed\n"
             "already). Stops before a message whose keys do not all fit or that has more than 64.\n"
             "Returns (position reached, entry_count, used_slots, i of the last message indexed or -1).");

static PyObject *index_put(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13 || !PyUnicode_Check(args[8]) || !PyList_Check(args[9]) || !PyList_Check(args[10])) {
        PyErr_SetString(PyExc_TypeError, "index_put() takes a mapping, 7 numbers, a str prefix, a list of keyed "
                                         "messages, a list of offsets, a start position and an end offset");
        return NULL;
    }
    long long numbers[7], start, indexed_end;
    for (int k = 0; k < 7; k++)
        numbers[k] = PyLong_AsLongLong(args[1 + k]);
    start = PyLong_AsLongLong(args[11]);
    indexed_end = PyLong_AsLongLong(args[12]);
    if (PyErr_Occurred())
        return NULL;
    long long slots_start = numbers[0], slot_count = numbers[1], entries_start = numbers[2];
    long long max_entries = numbers[3], count = numbers[4], used = numbers[5], delta_s = numbers[6];
    Py_ssize_t prefix_n;
    const char *prefix = PyUnicode_AsUTF8AndSize(args[8], &prefix_n);
    if (prefix == NULL)
        return NULL;
    Py_buffer mm;
    if (PyObject_GetBuffer(args[0], &mm, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *indexed = args[9], *offsets = args[10], *result = NULL;
    Py_ssize_t position = start, total = PyList_GET_SIZE(indexed), last = -1;
    if (slots_start < 0 || slot_count < 1 || max_entries < 1 || count < 0 || count > max_entries ||
        delta_s < INT32_MIN || delta_s > INT32_MAX || start < 0 ||
        slots_start + slot_count * INDEX_SLOT_BYTES > entries_start ||
        entries_start + max_entries * INDEX_ENTRY_BYTES > (long long)mm.len) {
        PyErr_SetString(PyExc_ValueError, "index_put(): the geometry does not fit the mapping");
        goto done;
    }
    uint8_t *base = mm.buf;
    uint32_t prefix_crc = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < prefix_n; i++)
        prefix_crc = (prefix_crc >> 8) ^ tag_crc_table[(prefix_crc ^ (uint8_t)prefix[i]) & 0xFF];
    Key keys[INDEX_MAX_KEYS];
    for (; position < total; position++) {
        PyObject *item = PyList_GET_ITEM(indexed, position);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "index_put(): a keyed message is a tuple (i, keys, unique_key)");
            goto done;
        }
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
        if (i == -1 && PyErr_Occurred())
            goto done;
        if (i < 0 || i >= PyList_GET_SIZE(offsets)) {
            PyErr_SetString(PyExc_IndexError, "index_put(): a message index is out of the offsets' range");
            goto done;
        }
        long long offset = PyLong_AsLongLong(PyList_GET_ITEM(offsets, i));
        if (offset == -1 && PyErr_Occurred())
            goto done;
        if (offset < indexed_end)
            continue;
        const char *raw, *unique;
        Py_ssize_t raw_n, unique_n;
        if (key_text(PyTuple_GET_ITEM(item, 1), &raw, &raw_n) < 0 ||
            key_text(PyTuple_GET_ITEM(item, 2), &unique, &unique_n) < 0)
            goto done;
        int n = message_keys(raw, raw_n, unique, unique_n, keys);
        if (n < 0 || n > max_entries - count || offset < 0)
            break; /* the Python path: a roll, a split over files, or its error */
        for (int k = 0; k < n; k++) {
            uint32_t crc = prefix_crc;
            const uint8_t *p = (const uint8_t *)keys[k].p;
            for (Py_ssize_t b = 0; b < keys[k].n; b++)
                crc = (crc >> 8) ^ tag_crc_table[(crc ^ p[b]) & 0xFF];
            uint32_t hash = ~crc;
            uint8_t *slot = base + slots_start + (long long)(hash % (uint64_t)slot_count) * INDEX_SLOT_BYTES;
            uint32_t head = get32(slot);
            if (head == 0)
                used++;
            uint8_t *entry = base + entries_start + count * INDEX_ENTRY_BYTES;
            put32(entry, hash);
            put64(entry + 4, (uint64_t)offset);
            put32(entry + 12, (uint32_t)delta_s);
            put32(entry + 16, head);
            count++;
            put32(slot, (uint32_t)count);
        }
        last = i;
    }
    result = Py_BuildValue("(nLLn)", position, count, used, last);
done:
    PyBuffer_Release(&mm);
    return result;
}

/* -- the send's reply ---------------------------------------------------------------------- */

#define REPLY_STATUS 1 /* SendMessageResponse fields */
#define REPLY_MSG_IDS 2
#define REPLY_QUEUE_ID 3
#define REPLY_QUEUE_OFFSET 4
#define REPLY_BROKER_NAME 5
#define REPLY_TRANSACTION_ID 6
#define REPLY_COMMIT_LOG_OFFSET 7

static uint8_t *put_varint(uint8_t *out, uint64_t v) {
    while (v >= 0x80) {
        *out++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *out++ = (uint8_t)v;
    return out;
}

/* A proto3 scalar: left out when it is zero, as protobuf leaves it out. */
static uint8_t *put_number(uint8_t *out, int field, int64_t value) {
    if (value == 0)
        return out;
    *out++ = (uint8_t)(field << 3 | VARINT);
    return put_varint(out, (uint64_t)value); /* negative int32 and int64 alike: ten bytes */
}

static uint8_t *put_text(uint8_t *out, int field, const char *text, Py_ssize_t len) {
    if (len == 0)
        return out;
    *out++ = (uint8_t)(field << 3 | LEN);
    out = put_varint(out, (uint64_t)len);
    memcpy(out, text, (size_t)len);
    return out + len;
}

PyDoc_STRVAR(send_reply_doc,
             "send_reply(status, id_prefix, first_offset, sizes, queue_id, queue_offset, broker_name,\n"
             "           transaction_id)\n--\n\n"
             "The wire bytes of the SendMessageResponse for records laid back to back from\n"
             "``first_offset``: their offset ids (``id_prefix``, the store host's hex, then each offset\n"
             "as 16 uppercase hex digits), commit_log_offset = first_offset, and the given fields;\n"
             "what SendMessageResponse(...).SerializeToString() gives, without building the message.");

static PyObject *send_reply(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyUnicode_Check(args[1]) || !PyUnicode_IS_ASCII(args[1]) || !PyList_Check(args[3]) ||
        !PyUnicode_Check(args[6]) || !PyUnicode_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "send_reply() takes a status, an ASCII id prefix, an offset, a list of "
                                         "sizes, a queue id, a queue offset, a broker name and a transaction id");
        return NULL;
    }
    long status = PyLong_AsLong(args[0]);
    long long first = PyLong_AsLongLong(args[2]);
    long queue_id = PyLong_AsLong(args[4]);
    long long queue_offset = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (first < 0 || queue_id < INT32_MIN || queue_id > INT32_MAX || status < INT32_MIN || status > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "send_reply(): offset, status or queue id out of range");
        return NULL;
    }
    Py_ssize_t prefix_len = PyUnicode_GET_LENGTH(args[1]), count = PyList_GET_SIZE(args[3]);
    Py_ssize_t name_len, transaction_len;
    const char *prefix = (const char *)PyUnicode_DATA(args[1]);
    const char *name = PyUnicode_AsUTF8AndSize(args[6], &name_len);
    const char *transaction = PyUnicode_AsUTF8AndSize(args[7], &transaction_len);
    if (name == NULL || transaction == NULL)
        return NULL;
    Py_ssize_t id_len = prefix_len + 16;
    if (id_len > 0x7F) {
        PyErr_SetString(PyExc_ValueError, "send_reply(): the id prefix is too long");
        return NULL;
    }
    /* Each number takes at most 11 bytes with its tag, each text 10 plus its length. */
    size_t room = 4 * 11 + (size_t)count * (2 + (size_t)id_len) + 20 + (size_t)name_len + (size_t)transaction_len;
    uint8_t *buffer = PyMem_Malloc(room), *out = buffer;
    if (buffer == NULL)
        return PyErr_NoMemory();
    static const char digits[] = "0123456789ABCDEF";
    out = put_number(out, REPLY_STATUS, status);
    long long offset = first;
    for (Py_ssize_t i = 0; i < count; i++) {
        *out++ = REPLY_MSG_IDS << 3 | LEN;
        *out++ = (uint8_t)id_len;
        memcpy(out, prefix, (size_t)prefix_len);
        out += prefix_len;
        for (int d = 0; d < 16; d++)
            *out++ = (uint8_t)digits[((unsigned long long)offset >> (60 - 4 * d)) & 0xF];
        long long size = PyLong_AsLongLong(PyList_GET_ITEM(args[3], i));
        if (size == -1 && PyErr_Occurred()) {
            PyMem_Free(buffer);
            return NULL;
        }
        offset += size;
    }
    out = put_number(out, REPLY_QUEUE_ID, (int32_t)queue_id);
    out = put_number(out, REPLY_QUEUE_OFFSET, queue_offset);
    out = put_text(out, REPLY_BROKER_NAME, name, name_len);
    out = put_text(out, REPLY_TRANSACTION_ID, transaction, transaction_len);
    out = put_number(out, REPLY_COMMIT_LOG_OFFSET, first);
    PyObject *reply = PyBytes_FromStringAndSize((const char *)buffer, out - buffer);
    PyMem_Free(buffer);
    return reply;
}

/* -- the pull's reply ---------------------------------------------------------------------- */

#define PULL_STATUS 1 /* PullMessageResponse fields */
#define PULL_NEXT_BEGIN_OFFSET 2
#define PULL_MIN_OFFSET 3
#define PULL_MAX_OFFSET 4
#define PULL_SUGGEST_WHICH_BROKER_ID 5
#define PULL_RECORDS 6

PyDoc_STRVAR(pull_reply_doc,
             "pull_reply(status, next_begin_offset, min_offset, max_offset, suggest_which_broker_id,\n"
             "           records)\n--\n\n"
             "The wire bytes of a PullMessageResponse holding ``records`` (a list of bytes): what\n"
             "PullMessageResponse(...).SerializeToString() gives, with each record copied once.");

static PyObject *pull_reply(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "pull_reply() takes a status, four numbers and a list of records");
        return NULL;
    }
    long long numbers[5];
    for (int i = 0; i < 5; i++) {
        numbers[i] = PyLong_AsLongLong(args[i]);
        if (numbers[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    if (numbers[0] < INT32_MIN || numbers[0] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "pull_reply(): the status must fit in 32 bits");
        return NULL;
    }
    PyObject *records = args[5];
    Py_ssize_t count = PyList_GET_SIZE(records);
    size_t room = 5 * 11;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        if (!PyBytes_Check(record)) {
            PyErr_SetString(PyExc_TypeError, "pull_reply(): records must be bytes");
            return NULL;
        }
        room += 11 + (size_t)PyBytes_GET_SIZE(record);
    }
    /* (Records are bytes: the list may not change under us, nothing here runs Python code.) */
    PyObject *reply = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)room);
    if (reply == NULL)
        return NULL;
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(reply), *out = start;
    out = put_number(out, PULL_STATUS, (int32_t)numbers[0]);
    out = put_number(out, PULL_NEXT_BEGIN_OFFSET, numbers[1]);
    out = put_number(out, PULL_MIN_OFFSET, numbers[2]);
    out = put_number(out, PULL_MAX_OFFSET, numbers[3]);
    out = put_number(out, PULL_SUGGEST_WHICH_BROKER_ID, numbers[4]);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        Py_ssize_t len = PyBytes_GET_SIZE(record);
        *out++ = PULL_RECORDS << 3 | LEN; /* a repeated field: every element, empty or not */
        out = put_varint(out, (uint64_t)len);
        memcpy(out, PyBytes_AS_STRING(record), (size_t)len);
        out += len;
    }
    if (_PyBytes_Resize(&reply, out - start) < 0)
        return NULL;
    return reply;
}

/* -- pulled records as Arrow columns (the Spark data source's read) ----------------------- */

/* A growing byte buffer; `failed` is set (and a MemoryError raised) once an append fails. */
typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} Buf;

static int buf_reserve(Buf *b, size_t more) {
    if (b->failed)
        return -1;
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        b->failed = 1;
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_add(Buf *b, const void *p, size_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int buf_i32(Buf *b, int32_t v) { return buf_add(b, &v, 4); }
static int buf_i64(Buf *b, int64_t v) { return buf_add(b, &v, 8); }

/* The offset a string column's next value starts at (Arrow's int32 offsets: 2 GiB per column). */
static int32_t buf_at(const Buf *b) { return (int32_t)b->len; }

static PyObject *buf_bytes(Buf *b) {
    PyObject *out = PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
    PyMem_Free(b->data);
    b->data = NULL;
    return out;
}

static inline int32_t get32s(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} Slice;

static int same_name(Slice a, const char *b, Py_ssize_t n) { return a.n == n && memcmp(a.p, b, (size_t)n) == 0; }

enum { COL_TOPIC_OFF, COL_TOPIC, COL_QUEUE, COL_QUEUE_OFFSET, COL_ID_OFF, COL_ID, COL_KEYS_OFF, COL_KEY_OFF,
       COL_KEY, COL_TAG_VALID, COL_TAG_OFF, COL_TAG, COL_PROPS_OFF, COL_PKEY_OFF, COL_PKEY, COL_PVAL_OFF,
       COL_PVAL, COL_BODY_OFF, COL_BODY, COL_BORN, COL_STORED, COL_RECONSUME, COLUMNS };

PyDoc_STRVAR(pull_columns_doc,
             "pull_columns(records, start, end, uniq_key, keys, tags, system_names)\n--\n\n"
             "The records of a pull (a sequence of whole records) whose queue offset is in\n"
             "[start, end), as the Arrow buffers of the Spark read schema's columns (little-endian\n"
             "int32 offsets and values): (count, columns, missing_ids). ``columns`` are bytes: topic\n"
             "offsets and data; queue ids; queue offsets; msg id offsets and data (the ``uniq_key``\n"
             "property; empty where a record has none, its index then in ``missing_ids``); keys as\n"
             "list offsets, string offsets and data (the ``keys`` property split on spaces, empty\n"
             "pieces dropped); tags as a validity bitmap, offsets and data; the user properties (names\n"
             "not in ``system_names``) as map offsets, name offsets and data, value offsets and data;\n"
             "body offsets and data; born and store timestamps in microseconds; reconsume times.\n"
             "Raises ValueError for a record that does not check (as record.decode), and returns None\n"
             "for records whose properties the Python path must read (non-ASCII text, a name twice).");

static PyObject *pull_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyBytes_Check(args[3]) || !PyBytes_Check(args[4]) || !PyBytes_Check(args[5]) ||
        !PyTuple_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "pull_columns() takes records, start, end, three property names as "
                                         "bytes and a tuple of system property names");
        return NULL;
    }
    long long start = PyLong_AsLongLong(args[1]), end = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Slice uniq = {(const uint8_t *)PyBytes_AS_STRING(args[3]), PyBytes_GET_SIZE(args[3])};
    Slice keys_name = {(const uint8_t *)PyBytes_AS_STRING(args[4]), PyBytes_GET_SIZE(args[4])};
    Slice tags_name = {(const uint8_t *)PyBytes_AS_STRING(args[5]), PyBytes_GET_SIZE(args[5])};
    PyObject *system = args[6];
    for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(system); s++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(system, s))) {
            PyErr_SetString(PyExc_TypeError, "pull_columns(): system property names must be bytes");
            return NULL;
        }
    PyObject *seq = PySequence_Fast(args[0], "pull_columns(): records must be a sequence");
    if (seq == NULL)
        return NULL;
    Buf col[COLUMNS];
    memset(col, 0, sizeof col);
    PyObject *missing = PyList_New(0);
    PyObject *result = NULL;
    int declined = 0;
    Py_ssize_t count = 0, total = PySequence_Fast_GET_SIZE(seq);
    int32_t keys_items = 0, props_items = 0;
    if (missing == NULL)
        goto done;
    buf_i32(&col[COL_TOPIC_OFF], 0);
    buf_i32(&col[COL_ID_OFF], 0);
    buf_i32(&col[COL_KEYS_OFF], 0);
    buf_i32(&col[COL_KEY_OFF], 0);
    buf_i32(&col[COL_TAG_OFF], 0);
    buf_i32(&col[COL_PROPS_OFF], 0);
    buf_i32(&col[COL_PKEY_OFF], 0);
    buf_i32(&col[COL_PVAL_OFF], 0);
    buf_i32(&col[COL_BODY_OFF], 0);
    for (Py_ssize_t i = 0; i < total && !declined; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "pull_columns(): every record must be bytes");
            goto done;
        }
        const uint8_t *r = (const uint8_t *)PyBytes_AS_STRING(item);
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        if (len < HEADER_BYTES) {
            PyErr_Format(PyExc_ValueError, "record of %zd bytes is shorter than the %d-byte header", len,
                         HEADER_BYTES);
            goto done;
        }
        int32_t size = get32s(r), body_len = get32s(r + 108);
        uint32_t magic = (uint32_t)get32s(r + 4);
        int64_t queue_offset = get64(r + 20), physical = get64(r + 28);
        if (magic != MESSAGE_MAGIC) {
            PyErr_Format(PyExc_ValueError, "magic %#x is not a message record", magic);
            goto done;
        }
        if (size > len || body_len < 0 || (int64_t)HEADER_BYTES + body_len + 4 > size) {
            PyErr_Format(PyExc_ValueError, "record sizes do not fit: total %d, body %d, buffer %zd", size, body_len,
                         len);
            goto done;
        }
        const uint8_t *body = r + HEADER_BYTES;
        if (crc32c(0, body, (size_t)body_len) != (uint32_t)get32s(r + 8)) {
            PyErr_Format(PyExc_ValueError, "body CRC mismatch at physical offset %lld", (long long)physical);
            goto done;
        }
        Py_ssize_t pos = HEADER_BYTES + body_len;
        Slice topic = {r + pos + 2, get16(r + pos)};
        pos += 2 + topic.n;
        if (pos + 2 > size) {
            PyErr_Format(PyExc_ValueError, "record length %d does not match its fields at offset %lld", size,
                         (long long)physical);
            goto done;
        }
        Py_ssize_t props_len = get16(r + pos);
        pos += 2;
        if (pos + props_len != size) {
            PyErr_Format(PyExc_ValueError, "record length %d does not match its fields at offset %lld", size,
                         (long long)physical);
            goto done;
        }
        if (queue_offset < start || queue_offset >= end)
            continue;
        /* properties: name \x01 value \x02 ..., as record.decode_properties reads them */
        const uint8_t *props = r + pos;
        Slice names[MAX_ENTRIES], values[MAX_ENTRIES];
        int pairs = 0;
        for (Py_ssize_t at = 0; at < props_len;) {
            const uint8_t *stop = memchr(props + at, 0x02, (size_t)(props_len - at));
            Py_ssize_t pair_end = stop ? stop - props : props_len;
            if (pair_end > at) {
                if (pairs == MAX_ENTRIES) {
                    declined = 1;
                    break;
                }
                const uint8_t *sep = memchr(props + at, 0x01, (size_t)(pair_end - at));
                Py_ssize_t name_end = sep ? sep - props : pair_end;
                names[pairs] = (Slice){props + at, name_end - at};
                values[pairs] = sep ? (Slice){sep + 1, pair_end - name_end - 1} : (Slice){props + pair_end, 0};
                for (int k = 0; k < pairs; k++)
                    if (names[k].n == names[pairs].n && memcmp(names[k].p, names[pairs].p, (size_t)names[k].n) == 0)
                        declined = 1; /* a dict keeps the last value at the first place: Python's job */
                pairs++;
            }
            at = pair_end + 1;
        }
        for (Py_ssize_t k = 0; k < props_len && !declined; k++)
            if (props[k] >= 0x80)
                declined = 1; /* UTF-8 beyond ASCII: the Python path checks and decodes it */
        for (Py_ssize_t k = 0; k < topic.n && !declined; k++)
            if (topic.p[k] >= 0x80)
                declined = 1;
        if (declined)
            break;
        Slice id = {NULL, 0}, keys = {NULL, 0}, tag = {NULL, 0};
        int has_tag = 0;
        for (int k = 0; k < pairs; k++) {
            if (same_name(names[k], (const char *)uniq.p, uniq.n))
                id = values[k];
            else if (same_name(names[k], (const char *)keys_name.p, keys_name.n))
                keys = values[k];
            else if (same_name(names[k], (const char *)tags_name.p, tags_name.n))
                tag = values[k], has_tag = 1;
        }
        buf_add(&col[COL_TOPIC], topic.p, (size_t)topic.n);
        buf_i32(&col[COL_TOPIC_OFF], buf_at(&col[COL_TOPIC]));
        buf_i32(&col[COL_QUEUE], get32s(r + 12));
        buf_i64(&col[COL_QUEUE_OFFSET], queue_offset);
        if (id.n == 0) {
            PyObject *index = PyLong_FromSsize_t(count);
            if (index == NULL || PyList_Append(missing, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
        }
        buf_add(&col[COL_ID], id.p, (size_t)id.n);
        buf_i32(&col[COL_ID_OFF], buf_at(&col[COL_ID]));
        for (Py_ssize_t at = 0; at < keys.n;) { /* split on ' ', empty pieces dropped */
            const uint8_t *space = memchr(keys.p + at, ' ', (size_t)(keys.n - at));
            Py_ssize_t piece_end = space ? space - keys.p : keys.n;
            if (piece_end > at) {
                buf_add(&col[COL_KEY], keys.p + at, (size_t)(piece_end - at));
                buf_i32(&col[COL_KEY_OFF], buf_at(&col[COL_KEY]));
                keys_items++;
            }
            at = piece_end + 1;
        }
        buf_i32(&col[COL_KEYS_OFF], keys_items);
        if (count % 8 == 0)
            buf_add(&col[COL_TAG_VALID], "", 1);
        if (has_tag && !col[COL_TAG_VALID].failed)
            col[COL_TAG_VALID].data[count / 8] |= (char)(1 << (count % 8));
        buf_add(&col[COL_TAG], tag.p, (size_t)tag.n);
        buf_i32(&col[COL_TAG_OFF], buf_at(&col[COL_TAG]));
        for (int k = 0; k < pairs; k++) {
            int is_system = 0;
            for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(system) && !is_system; s++) {
                PyObject *name = PyTuple_GET_ITEM(system, s);
                is_system = same_name(names[k], PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name));
            }
            if (is_system)
                continue;
            buf_add(&col[COL_PKEY], names[k].p, (size_t)names[k].n);
            buf_i32(&col[COL_PKEY_OFF], buf_at(&col[COL_PKEY]));
            buf_add(&col[COL_PVAL], values[k].p, (size_t)values[k].n);
            buf_i32(&col[COL_PVAL_OFF], buf_at(&col[COL_PVAL]));
            props_items++;
        }
        buf_i32(&col[COL_PROPS_OFF], props_items);
        buf_add(&col[COL_BODY], body, (size_t)body_len);
        buf_i32(&col[COL_BODY_OFF], buf_at(&col[COL_BODY]));
        buf_i64(&col[COL_BORN], get64(r + 40) * 1000);
        buf_i64(&col[COL_STORED], get64(r + 68) * 1000);
        buf_i32(&col[COL_RECONSUME], get32s(r + 96));
        count++;
        for (int c = 0; c < COLUMNS; c++)
            if (col[c].failed)
                goto done;
        if (col[COL_BODY].len > INT32_MAX / 2 || col[COL_PVAL].len > INT32_MAX / 2) {
            PyErr_SetString(PyExc_ValueError, "pull_columns(): over 1 GiB of bodies or properties in one call");
            goto done;
        }
    }
    if (declined) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *columns = PyTuple_New(COLUMNS);
    if (columns == NULL)
        goto done;
    for (int c = 0; c < COLUMNS; c++) {
        PyObject *bytes = buf_bytes(&col[c]);
        if (bytes == NULL) {
            Py_DECREF(columns);
            goto done;
        }
        PyTuple_SET_ITEM(columns, c, bytes);
    }
    result = Py_BuildValue("(nNO)", count, columns, missing);
done:
    for (int c = 0; c < COLUMNS; c++)
        PyMem_Free(col[c].data);
    Py_XDECREF(missing);
    Py_DECREF(seq);
    return result;
}

/* -- the consumer's side: a pull's records as StoredMessage objects ------------------------- */

/* Client code: a push consumer decodes every record it pulls, and in Python that is a header
   unpack, four slices, two host look-ups and a frozen dataclass's __init__ (one
   object.__setattr__ a field): about 3 us a message, a third of the consumer's CPU. Here the
   objects are allocated and their slots filled through the slots' own descriptors (the
   descriptor protocol's __set__, which a frozen dataclass's __setattr__ does not intercept), so
   what comes out is what record.decode builds. */

typedef struct {
    uint8_t key[20]; /* address (16) and port (4), as in the record */
    PyObject *text;
} HostCache;

/* The "address:port" text of a record's 16-byte address and port, from decode_host on a miss. */
static PyObject *host_text(HostCache *cache, const uint8_t *at, PyObject *decode_host) {
    if (cache->text != NULL && memcmp(cache->key, at, 20) == 0)
        return Py_NewRef(cache->text);
    PyObject *text = PyObject_CallFunction(decode_host, "y#k", (const char *)at, (Py_ssize_t)16,
                                           (unsigned long)(uint32_t)get32s(at + 16));
    if (text == NULL)
        return NULL;
    Py_XSETREF(cache->text, Py_NewRef(text));
    memcpy(cache->key, at, 20);
    return text;
}

/* Store ``value`` (a new reference, consumed; NULL: an error already set) in ``obj``'s slot. */
static int set_slot(PyObject *descriptor, PyObject *obj, PyObject *value) {
    if (value == NULL)
        return -1;
    int rc = Py_TYPE(descriptor)->tp_descr_set(descriptor, obj, value);
    Py_DECREF(value);
    return rc;
}

#define STORED_FIELDS 16

PyDoc_STRVAR(decode_records_doc,
             "decode_records(records, message_type, fields, properties_type, properties_fields,\n"
             "               decode_host, check_crc)\n--\n\n"
             "Whole records (a sequence of bytes) as ``message_type`` objects (record.StoredMessage):\n"
             "``fields`` are its 16 slot descriptors in field order, ``properties_type`` the lazy\n"
             "properties (record.LazyProperties) with the descriptors of its raw bytes and parsed dict\n"
             "slots; a record without properties gets an empty dict, as record.decode gives it. Hosts\n"
             "come from ``decode_host(address, port)``, called once per distinct host in a row.\n"
             "Returns a list, or None when a record does not check (record.decode raises its error).");

static PyObject *decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyType_Check(args[1]) || !PyTuple_Check(args[2]) || !PyType_Check(args[3]) ||
        !PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[2]) != STORED_FIELDS || PyTuple_GET_SIZE(args[4]) != 2) {
        PyErr_SetString(PyExc_TypeError, "decode_records() takes records, a type and its 16 slot descriptors, "
                                         "a properties type and its 2 slot descriptors, decode_host, check_crc");
        return NULL;
    }
    PyTypeObject *message_type = (PyTypeObject *)args[1], *properties_type = (PyTypeObject *)args[3];
    PyObject *fields = args[2], *properties_fields = args[4], *decode_host = args[5];
    for (Py_ssize_t i = 0; i < STORED_FIELDS + 2; i++) {
        PyObject *d = i < STORED_FIELDS ? PyTuple_GET_ITEM(fields, i) : PyTuple_GET_ITEM(properties_fields, i - 16);
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyErr_SetString(PyExc_TypeError, "decode_records(): every field must be a slot (member descriptor)");
            return NULL;
        }
    }
    int check_crc = PyObject_IsTrue(args[6]);
    if (check_crc < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "decode_records(): records must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t total = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(total);
    HostCache born = {{0}, NULL}, stored = {{0}, NULL};
    PyObject *topic = NULL;
    const uint8_t *topic_at = NULL;
    Py_ssize_t topic_n = -1;
    int declined = 0;
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < total; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "decode_records(): every record must be bytes");
            goto fail;
        }
        const uint8_t *r = (const uint8_t *)PyBytes_AS_STRING(item);
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        if (len < HEADER_BYTES) {
            declined = 1;
            break;
        }
        int32_t size = get32s(r), body_len = get32s(r + 108);
        if ((uint32_t)get32s(r + 4) != MESSAGE_MAGIC || size > len || body_len < 0 ||
            (int64_t)HEADER_BYTES + body_len + 4 > size) {
            declined = 1;
            break;
        }
        const uint8_t *body = r + HEADER_BYTES;
        uint32_t crc = (uint32_t)get32s(r + 8);
        if (check_crc && crc32c(0, body, (size_t)body_len) != crc) {
            declined = 1;
            break;
        }
        Py_ssize_t pos = HEADER_BYTES + body_len, name_n = get16(r + pos);
        const uint8_t *name = r + pos + 2;
        pos += 2 + name_n;
        if (pos + 2 > size || pos + 2 + get16(r + pos) != size) {
            declined = 1;
            break;
        }
        Py_ssize_t props_n = get16(r + pos);
        pos += 2;
        if (topic == NULL || name_n != topic_n || memcmp(name, topic_at, (size_t)name_n) != 0) {
            PyObject *decoded = PyUnicode_DecodeUTF8((const char *)name, name_n, NULL);
            if (decoded == NULL) {
                PyErr_Clear(); /* record.decode raises the UnicodeDecodeError */
                declined = 1;
                break;
            }
            Py_XSETREF(topic, decoded);
            topic_at = name, topic_n = name_n;
        }
        PyObject *properties;
        if (props_n == 0) {
            properties = PyDict_New();
        } else if ((properties = properties_type->tp_alloc(properties_type, 0)) != NULL) {
            if (set_slot(PyTuple_GET_ITEM(properties_fields, 0), properties,
                         PyBytes_FromStringAndSize((const char *)r + pos, props_n)) < 0 ||
                set_slot(PyTuple_GET_ITEM(properties_fields, 1), properties, Py_NewRef(Py_None)) < 0)
                Py_CLEAR(properties);
        }
        if (properties == NULL)
            goto fail;
        PyObject *message = message_type->tp_alloc(message_type, 0);
        if (message == NULL) {
            Py_DECREF(properties);
            goto fail;
        }
        PyList_SET_ITEM(out, i, message);
        PyObject *values[STORED_FIELDS] = {
            Py_NewRef(topic),
            PyLong_FromLong(get32s(r + 12)),                                        /* queue_id */
            PyLong_FromLongLong(get64(r + 20)),                                     /* queue_offset */
            PyLong_FromLongLong(get64(r + 28)),                                     /* physical_offset */
            PyBytes_FromStringAndSize((const char *)body, body_len),               /* body */
            properties,                                                             /* properties */
            PyLong_FromLong(get32s(r + 16)),                                        /* flag */
            PyLong_FromLong(get32s(r + 36)),                                        /* sys_flag */
            PyLong_FromLongLong(get64(r + 40)),                                     /* born_timestamp_ms */
            host_text(&born, r + 48, decode_host),                                  /* born_host */
            PyLong_FromLongLong(get64(r + 68)),                                     /* store_timestamp_ms */
            host_text(&stored, r + 76, decode_host),                                /* store_host */
            PyLong_FromLong(get32s(r + 96)),                                        /* reconsume_times */
            PyLong_FromLongLong(get64(r + 100)),                                    /* prepared_tx_offset */
            PyLong_FromUnsignedLong(crc),                                           /* body_crc */
            PyLong_FromLong(size),                                                  /* size */
        };
        int failed = 0;
        for (int f = 0; f < STORED_FIELDS; f++)
            if (failed)
                Py_XDECREF(values[f]);
            else
                failed = set_slot(PyTuple_GET_ITEM(fields, f), message, values[f]) < 0;
        if (failed)
            goto fail;
        /* Neither object can be part of a reference cycle (frozen; strings, numbers, bytes and
           a dict of strings), so the cyclic GC need not track them: untracked, a backlog in
           the process queues is not walked by every full collection, and a pull's messages
           do not count towards the next one (CPython untracks tuples and dicts of atoms too). */
        if (PyObject_GC_IsTracked(message))
            PyObject_GC_UnTrack(message);
        if (props_n != 0 && PyObject_GC_IsTracked(properties))
            PyObject_GC_UnTrack(properties);
    }
    Py_XDECREF(topic);
    Py_XDECREF(born.text);
    Py_XDECREF(stored.text);
    Py_DECREF(seq);
    if (declined) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(born.text);
    Py_XDECREF(stored.text);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* -- the producer's side: one message of a send request ------------------------------------- */

/* Client code, apart from the broker's paths above: a producer's coalesced call is the request's
   own fields followed by each message as field 4, and each message is encoded here when its send
   is called (orbitmq/client/send_wire.py), without a protobuf object per message. */

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A LEN field's size: tag, length, payload. */
static size_t len_field_size(size_t n) { return 1 + varint_size(n) + n; }

/* A map entry's payload: key = 1 and value = 2, both written even when empty. */
static size_t entry_size(Py_ssize_t key, Py_ssize_t value) {
    return len_field_size((size_t)key) + len_field_size((size_t)value);
}

static uint8_t *put_len_field(uint8_t *out, int field, const char *p, Py_ssize_t n) {
    *out++ = (uint8_t)(field << 3 | LEN);
    out = put_varint(out, (uint64_t)n);
    memcpy(out, p, (size_t)n);
    return out + n;
}

static uint8_t *put_entry(uint8_t *out, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) {
    *out++ = (uint8_t)(MESSAGE_PROPS << 3 | LEN);
    out = put_varint(out, entry_size(kn, vn));
    out = put_len_field(out, 1, k, kn);
    return put_len_field(out, 2, v, vn);
}

/* The system properties a producer adds to a message's own (orbitmq.common.topics.Property). */
static const char *const frame_names[] = {"TAGS", "KEYS", "UNIQ_KEY"};

/* UTF-8 of an optional str argument (None or "": absent, *n = -1). */
static int optional_text(PyObject *o, const char **p, Py_ssize_t *n, const char *what) {
    *n = -1;
    if (o == Py_None)
        return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "frame_message(): %s must be a str or None", what);
        return -1;
    }
    if ((*p = PyUnicode_AsUTF8AndSize(o, n)) == NULL)
        return -1;
    if (*n == 0)
        *n = -1;
    return 0;
}

PyDoc_STRVAR(frame_message_doc,
             "frame_message(topic, body, flag, properties, tags, keys, unique_key)\n--\n\n"
             "A message as field 4 of a SendMessageRequest (tag, length, Message): ``topic``, ``body``\n"
             "(bytes-like), ``flag`` (int32) and the properties ``properties`` (a dict of str, or None)\n"
             "with TAGS = ``tags`` and KEYS = ``keys`` when not None or empty, and UNIQ_KEY =\n"
             "``unique_key``. Protobuf reads it as Message(topic=..., body=..., properties=..., flag=...);\n"
             "the caller checks the property names (no system name among ``properties``).");

static PyObject *frame_message(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[2]) ||
        (args[3] != Py_None && !PyDict_Check(args[3])) || !PyUnicode_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "frame_message() takes a topic, a body, a flag, a dict of properties "
                                         "or None, tags, keys and a unique key");
        return NULL;
    }
    long flag = PyLong_AsLong(args[2]);
    if (flag == -1 && PyErr_Occurred())
        return NULL;
    if (flag < INT32_MIN || flag > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "flag %ld is out of the int32 range", flag);
        return NULL;
    }
    Py_ssize_t topic_n, texts_n[3];
    const char *topic = PyUnicode_AsUTF8AndSize(args[0], &topic_n), *texts[3] = {NULL, NULL, NULL};
    if (topic == NULL || optional_text(args[4], &texts[0], &texts_n[0], "tags") < 0 ||
        optional_text(args[5], &texts[1], &texts_n[1], "keys") < 0 ||
        (texts[2] = PyUnicode_AsUTF8AndSize(args[6], &texts_n[2])) == NULL)
        return NULL;
    /* First pass: sizes (and every property a str: protobuf refuses anything else too). */
    size_t size = topic_n ? len_field_size((size_t)topic_n) : 0;
    PyObject *key, *value, *properties = args[3] == Py_None ? NULL : args[3];
    Py_ssize_t at = 0, kn, vn;
    while (properties != NULL && PyDict_Next(properties, &at, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyUnicode_Check(value)) {
            PyErr_Format(PyExc_TypeError, "property %R = %R: names and values must be str", key, value);
            return NULL;
        }
        if (PyUnicode_AsUTF8AndSize(key, &kn) == NULL || PyUnicode_AsUTF8AndSize(value, &vn) == NULL)
            return NULL;
        size += len_field_size(entry_size(kn, vn));
    }
    for (int i = 0; i < 3; i++)
        if (texts_n[i] >= 0)
            size += len_field_size(entry_size((Py_ssize_t)strlen(frame_names[i]), texts_n[i]));
    if (flag != 0)
        size += 1 + varint_size((uint64_t)(int64_t)flag);
    Py_buffer body;
    if (PyObject_GetBuffer(args[1], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    if (body.len)
        size += len_field_size((size_t)body.len);
    PyObject *framed = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(1 + varint_size(size) + size));
    if (framed == NULL) {
        PyBuffer_Release(&body);
        return NULL;
    }
    /* Second pass: the bytes (nothing above ran Python code, so the dict is as it was). */
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(framed);
    *out++ = (uint8_t)(REQUEST_MESSAGES << 3 | LEN);
    out = put_varint(out, size);
    out = put_text(out, MESSAGE_TOPIC, topic, topic_n);
    out = put_text(out, MESSAGE_BODY, body.buf, body.len);
    PyBuffer_Release(&body);
    at = 0;
    while (properties != NULL && PyDict_Next(properties, &at, &key, &value)) {
        const char *k = PyUnicode_AsUTF8AndSize(key, &kn), *v = PyUnicode_AsUTF8AndSize(value, &vn);
        out = put_entry(out, k, kn, v, vn);
    }
    for (int i = 0; i < 3; i++)
        if (texts_n[i] >= 0)
            out = put_entry(out, frame_names[i], (Py_ssize_t)strlen(frame_names[i]), texts[i], texts_n[i]);
    out = put_number(out, MESSAGE_FLAG, flag);
    return framed;
}

/* -- crc32c, for tests and for anyone who wants the same checksum --------------------------- */

PyDoc_STRVAR(crc32c_doc, "crc32c(data, value=0)\n--\n\nCRC-32C of ``data``, continuing from ``value``.");

static PyObject *crc32c_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c() takes data and an optional start value");
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 2) {
        value = PyLong_AsUnsignedLong(args[1]);
        if (PyErr_Occurred())
            return NULL;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = crc32c((uint32_t)value, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, scan_doc},
    {"write", (PyCFunction)(void (*)(void))write_records, METH_FASTCALL, write_doc},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c_py, METH_FASTCALL, crc32c_doc},
    {"offset_ids", (PyCFunction)(void (*)(void))offset_ids, METH_FASTCALL, offset_ids_doc},
    {"index_put", (PyCFunction)(void (*)(void))index_put, METH_FASTCALL, index_put_doc},
    {"read_records", (PyCFunction)(void (*)(void))read_records, METH_FASTCALL, read_records_doc},
    {"send_reply", (PyCFunction)(void (*)(void))send_reply, METH_FASTCALL, send_reply_doc},
    {"pull_reply", (PyCFunction)(void (*)(void))pull_reply, METH_FASTCALL, pull_reply_doc},
    {"pull_columns", (PyCFunction)(void (*)(void))pull_columns, METH_FASTCALL, pull_columns_doc},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, decode_records_doc},
    {"frame_message", (PyCFunction)(void (*)(void))frame_message, METH_FASTCALL, frame_message_doc},
    {NULL, NULL, 0, NULL},
};

/* The layout this build was compiled with: orbitmq/native.py compares it with the source tree. */
static const struct {
    const char *name;
    long value;
} constants[] = {
    {"REQUEST_PRODUCER_GROUP", REQUEST_PRODUCER_GROUP},
    {"REQUEST_TOPIC", REQUEST_TOPIC},
    {"REQUEST_QUEUE_ID", REQUEST_QUEUE_ID},
    {"REQUEST_MESSAGES", REQUEST_MESSAGES},
    {"REQUEST_BORN_TIMESTAMP_MS", REQUEST_BORN_TIMESTAMP},
    {"REQUEST_BORN_HOST", REQUEST_BORN_HOST},
    {"REQUEST_SYS_FLAG", REQUEST_SYS_FLAG},
    {"REQUEST_RECONSUME_TIMES", REQUEST_RECONSUME_TIMES},
    {"REQUEST_DEFAULT_TOPIC_QUEUE_NUMS", REQUEST_DEFAULT_QUEUE_NUMS},
    {"MESSAGE_TOPIC", MESSAGE_TOPIC},
    {"MESSAGE_BODY", MESSAGE_BODY},
    {"MESSAGE_PROPERTIES", MESSAGE_PROPS},
    {"MESSAGE_FLAG", MESSAGE_FLAG},
    {"MESSAGE_BORN_HOST", MESSAGE_BORN_HOST},
    {"MESSAGE_MAGIC", (long)MESSAGE_MAGIC},
    {"HEADER_BYTES", HEADER_BYTES},
    {"SHARED_POSITION", SHARED_POS},
    {"SHARED_BYTES", SHARED_BYTES},
    {"UNIT_BYTES", UNIT_BYTES},
    {"INDEX_SLOT_BYTES", INDEX_SLOT_BYTES},
    {"INDEX_ENTRY_BYTES", INDEX_ENTRY_BYTES},
    {"REPLY_STATUS", REPLY_STATUS},
    {"REPLY_MSG_IDS", REPLY_MSG_IDS},
    {"REPLY_QUEUE_ID", REPLY_QUEUE_ID},
    {"REPLY_QUEUE_OFFSET", REPLY_QUEUE_OFFSET},
    {"REPLY_BROKER_NAME", REPLY_BROKER_NAME},
    {"REPLY_TRANSACTION_ID", REPLY_TRANSACTION_ID},
    {"REPLY_COMMIT_LOG_OFFSET", REPLY_COMMIT_LOG_OFFSET},
    {"PULL_STATUS", PULL_STATUS},
    {"PULL_NEXT_BEGIN_OFFSET", PULL_NEXT_BEGIN_OFFSET},
    {"PULL_MIN_OFFSET", PULL_MIN_OFFSET},
    {"PULL_MAX_OFFSET", PULL_MAX_OFFSET},
    {"PULL_SUGGEST_WHICH_BROKER_ID", PULL_SUGGEST_WHICH_BROKER_ID},
    {"PULL_RECORDS", PULL_RECORDS},
};

static int exec_module(PyObject *module) {
    crc_init();
    tag_crc_init();
    const struct {
        PyStructSequence_Desc *desc;
        PyTypeObject **type;
        const char *name;
    } structs[] = {
        {&header_desc, &header_type, "SendHeader"},
        {&columns_desc, &columns_type, "ScanColumns"},
        {&scanned_desc, &scanned_type, "Scanned"},
    };
    for (size_t i = 0; i < sizeof structs / sizeof structs[0]; i++) {
        if (*structs[i].type == NULL && (*structs[i].type = PyStructSequence_NewType(structs[i].desc)) == NULL)
            return -1;
        if (PyModule_AddObjectRef(module, structs[i].name, (PyObject *)*structs[i].type) < 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
        if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0)
            return -1;
    return PyModule_AddIntConstant(module, "CRC_HARDWARE", crc_hardware);
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "orbitmq._native",
    .m_doc = "The per-message work of a send in C: request scan and commit-log record writing.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModuleDef_Init(&module_def); }
