// The image checksum on libuv's thread pool, with the OpenSSL that Node itself links: hashing overlaps the
// download and the disk writes, as it did on a worker thread, without the memory of the worker's second V8
// isolate (docs/decisions.md, docs/runtime.md). Only bytes the caller owns are read here, and only while the
// caller keeps them alive (a reference is held for the length of each job); one job per hasher runs at a time.
#define _POSIX_C_SOURCE 200809L
#define NAPI_VERSION 8
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_READ_BYTES (1024 * 1024)

typedef struct {
  EVP_MD_CTX *ctx;
  atomic_int stopped;
  int finished;
  int busy;
} Hasher;

typedef struct {
  napi_async_work work;
  napi_ref hasher_ref;
  napi_ref buffer_ref;
  napi_ref callback_ref;
  Hasher *hasher;
  const unsigned char *data;
  size_t length;
  char *path;
  int error;
  char hex[EVP_MAX_MD_SIZE * 2 + 1];
} Job;

#define CHECK(call)                                                                                          \
  do {                                                                                                       \
    if ((call) != napi_ok) return throw_last(env);                                                           \
  } while (0)

static napi_value throw_last(napi_env env) {
  const napi_extended_error_info *info = NULL;
  napi_get_last_error_info(env, &info);
  napi_throw_error(env, NULL, info && info->error_message ? info->error_message : "hash addon: N-API call failed");
  return NULL;
}

static void free_hasher(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  Hasher *h = data;
  EVP_MD_CTX_free(h->ctx);
  free(h);
}

static Hasher *unwrap(napi_env env, napi_value value) {
  void *data = NULL;
  if (napi_get_value_external(env, value, &data) != napi_ok || data == NULL) {
    napi_throw_type_error(env, NULL, "hash addon: not a hasher");
    return NULL;
  }
  return data;
}

// The hasher in `value`, if it may take a job or give its digest now (else a JavaScript error is thrown).
static Hasher *ready(napi_env env, napi_value value) {
  Hasher *h = unwrap(env, value);
  if (h != NULL && (h->finished || h->busy)) {
    napi_throw_error(env, NULL, h->busy ? "hash addon: a job is still running" : "hash addon: the digest was already taken");
    return NULL;
  }
  return h;
}

static void to_hex(const unsigned char *md, unsigned int n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (unsigned int i = 0; i < n; i++) {
    out[2 * i] = digits[md[i] >> 4];
    out[2 * i + 1] = digits[md[i] & 15];
  }
  out[2 * n] = '\0';
}

// create(algo) -> hasher
static napi_value create(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  char algo[32];
  size_t len = 0;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1 || napi_get_value_string_utf8(env, argv[0], algo, sizeof algo, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "hash addon: create(algo) needs an algorithm name");
    return NULL;
  }
  const EVP_MD *md = EVP_get_digestbyname(algo);
  if (md == NULL) {
    napi_throw_error(env, NULL, "hash addon: unknown digest algorithm");
    return NULL;
  }
  Hasher *h = calloc(1, sizeof *h);
  if (h == NULL || (h->ctx = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(h->ctx, md, NULL) != 1) {
    if (h) EVP_MD_CTX_free(h->ctx);
    free(h);
    napi_throw_error(env, NULL, "hash addon: cannot start the digest");
    return NULL;
  }
  napi_value result;
  if (napi_create_external(env, h, free_hasher, NULL, &result) != napi_ok) {
    free_hasher(env, h, NULL);
    return throw_last(env);
  }
  return result;
}

static void release_job(napi_env env, Job *job) {
  if (job->hasher_ref) napi_delete_reference(env, job->hasher_ref);
  if (job->buffer_ref) napi_delete_reference(env, job->buffer_ref);
  if (job->callback_ref) napi_delete_reference(env, job->callback_ref);
  if (job->work) napi_delete_async_work(env, job->work);
  free(job->path);
  free(job);
}

static void run_update(napi_env env, void *data) {
  (void)env;
  Job *job = data;
  job->error = EVP_DigestUpdate(job->hasher->ctx, job->data, job->length) == 1 ? 0 : EIO;
}

static void run_file(napi_env env, void *data) {
  (void)env;
  Job *job = data;
  unsigned char *chunk = malloc(FILE_READ_BYTES);
  int fd = open(job->path, O_RDONLY | O_CLOEXEC);
  if (chunk == NULL || fd < 0) {
    job->error = chunk == NULL ? ENOMEM : errno;
  } else {
    for (;;) {
      if (atomic_load(&job->hasher->stopped)) {
        job->error = ECANCELED;
        break;
      }
      ssize_t n = read(fd, chunk, FILE_READ_BYTES);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        job->error = errno;
        break;
      }
      if (n == 0) break;
      if (EVP_DigestUpdate(job->hasher->ctx, chunk, (size_t)n) != 1) {
        job->error = EIO;
        break;
      }
    }
    if (job->error == 0) {
      unsigned char md[EVP_MAX_MD_SIZE];
      unsigned int n = 0;
      if (EVP_DigestFinal_ex(job->hasher->ctx, md, &n) == 1) to_hex(md, n, job->hex);
      else job->error = EIO;
    }
  }
  if (fd >= 0) close(fd);
  free(chunk);
}

// Calls back (error) for an update, (error, hexDigest) for a file.
static void complete(napi_env env, napi_status status, void *data) {
  Job *job = data;
  napi_value callback, undefined, args[2];
  job->hasher->busy = 0;
  napi_get_undefined(env, &undefined);
  args[0] = undefined;
  args[1] = undefined;
  if (status != napi_ok || job->error != 0) {
    napi_value message;
    const char *text = status != napi_ok ? "the hashing job did not run" : strerror(job->error);
    napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &message);
    napi_create_error(env, NULL, message, &args[0]);
  } else if (job->path) {
    napi_create_string_utf8(env, job->hex, NAPI_AUTO_LENGTH, &args[1]);
  }
  if (napi_get_reference_value(env, job->callback_ref, &callback) == napi_ok) {
    napi_call_function(env, undefined, callback, 2, args, NULL);
  }
  release_job(env, job);
}

// Queues one job; the hasher, the buffer (if any) and the callback stay referenced until it completes.
static bool queue(napi_env env, Job *job, napi_value hasher, napi_value buffer, napi_value callback,
                  napi_async_execute_callback execute) {
  napi_value name;
  if (napi_create_reference(env, hasher, 1, &job->hasher_ref) != napi_ok ||
      (buffer && napi_create_reference(env, buffer, 1, &job->buffer_ref) != napi_ok) ||
      napi_create_reference(env, callback, 1, &job->callback_ref) != napi_ok ||
      napi_create_string_utf8(env, "imageHash", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, execute, complete, job, &job->work) != napi_ok ||
      napi_queue_async_work(env, job->work) != napi_ok) {
    throw_last(env);
    release_job(env, job);
    return false;
  }
  job->hasher->busy = 1;
  return true;
}

// update(hasher, buffer, length, callback): hashes the buffer's first `length` bytes on the thread pool.
static napi_value update(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  void *data = NULL;
  size_t size = 0;
  uint32_t length = 0;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Hasher *h = argc == 4 ? ready(env, argv[0]) : NULL;
  if (h == NULL) return NULL;
  if (napi_get_buffer_info(env, argv[1], &data, &size) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &length) != napi_ok || length > size) {
    napi_throw_range_error(env, NULL, "hash addon: update(hasher, buffer, length, callback) out of range");
    return NULL;
  }
  Job *job = calloc(1, sizeof *job);
  if (job == NULL) {
    napi_throw_error(env, NULL, "hash addon: out of memory");
    return NULL;
  }
  job->hasher = h;
  job->data = data;
  job->length = length;
  queue(env, job, argv[0], argv[1], argv[3], run_update);
  return NULL;
}

// digestFile(hasher, path, callback): reads a whole file on the thread pool, then calls back (error, hex).
static napi_value digest_file(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  size_t len = 0;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Hasher *h = argc == 3 ? ready(env, argv[0]) : NULL;
  if (h == NULL) return NULL;
  CHECK(napi_get_value_string_utf8(env, argv[1], NULL, 0, &len));
  Job *job = calloc(1, sizeof *job);
  if (job == NULL || (job->path = malloc(len + 1)) == NULL) {
    free(job);
    napi_throw_error(env, NULL, "hash addon: out of memory");
    return NULL;
  }
  napi_get_value_string_utf8(env, argv[1], job->path, len + 1, &len);
  if (strlen(job->path) != len) {
    release_job(env, job);
    napi_throw_type_error(env, NULL, "hash addon: a path with a NUL byte");
    return NULL;
  }
  job->hasher = h;
  // The file's job finalizes the digest: nothing may be added after it is queued.
  if (queue(env, job, argv[0], NULL, argv[2], run_file)) h->finished = 1;
  return NULL;
}

// digest(hasher) -> hex of everything updated so far; the hasher takes no more bytes after it.
static napi_value digest(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  char hex[EVP_MAX_MD_SIZE * 2 + 1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Hasher *h = argc == 1 ? ready(env, argv[0]) : NULL;
  if (h == NULL) return NULL;
  if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1) {
    napi_throw_error(env, NULL, "hash addon: the digest cannot be taken");
    return NULL;
  }
  h->finished = 1;
  to_hex(md, n, hex);
  CHECK(napi_create_string_utf8(env, hex, NAPI_AUTO_LENGTH, &result));
  return result;
}

// stop(hasher): a file being read stops at its next block and fails with ECANCELED.
static napi_value stop(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Hasher *h = argc == 1 ? unwrap(env, argv[0]) : NULL;
  if (h == NULL) return NULL;
  atomic_store(&h->stopped, 1);
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor methods[] = {
    {"create", NULL, create, NULL, NULL, NULL, napi_enumerable, NULL},
    {"update", NULL, update, NULL, NULL, NULL, napi_enumerable, NULL},
    {"digestFile", NULL, digest_file, NULL, NULL, NULL, napi_enumerable, NULL},
    {"digest", NULL, digest, NULL, NULL, NULL, napi_enumerable, NULL},
    {"stop", NULL, stop, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  if (napi_define_properties(env, exports, sizeof methods / sizeof methods[0], methods) != napi_ok) return NULL;
  return exports;
}
