#include "grammar/llg_api.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace ls::llg {

namespace {
std::mutex g_mutex;
Api g_api{};
const Api* g_loaded = nullptr;  // published under g_mutex; never reset (no dlclose)
std::string g_path;
std::string g_deferred_path;  // under g_mutex; cleared by the first loaded() that tries it

template <class Fn>
void resolve(void* handle, const char* name, Fn& out, const std::string& path) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) throw std::runtime_error("llguidance library " + path + " lacks " + name);
  out = reinterpret_cast<Fn>(sym);
}

// Caller holds g_mutex.
const Api& load_locked(const std::string& path) {
  if (g_loaded != nullptr) {
    if (path != g_path) throw std::runtime_error("llguidance already loaded from " + g_path);
    return *g_loaded;
  }
  // RTLD_LOCAL: the library's Rust symbols stay private; its Python symbols resolve against the
  // interpreter already in the process.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    throw std::runtime_error("cannot load llguidance from " + path + ": " + (err ? err : "unknown error"));
  }
  Api api{};
  resolve(handle, "llg_constraint_init_set_defaults", api.constraint_init_set_defaults, path);
  resolve(handle, "llg_new_tokenizer_v2", api.new_tokenizer_v2, path);
  resolve(handle, "llg_free_tokenizer", api.free_tokenizer, path);
  resolve(handle, "llg_new_matcher", api.new_matcher, path);
  resolve(handle, "llg_clone_matcher", api.clone_matcher, path);
  resolve(handle, "llg_free_matcher", api.free_matcher, path);
  resolve(handle, "llg_matcher_get_error", api.matcher_get_error, path);
  resolve(handle, "llg_matcher_is_error", api.matcher_is_error, path);
  resolve(handle, "llg_matcher_compute_mask_into", api.matcher_compute_mask_into, path);
  resolve(handle, "llg_matcher_get_mask_byte_size", api.matcher_get_mask_byte_size, path);
  resolve(handle, "llg_matcher_consume_token", api.matcher_consume_token, path);
  resolve(handle, "llg_matcher_validate_tokens", api.matcher_validate_tokens, path);
  resolve(handle, "llg_matcher_is_stopped", api.matcher_is_stopped, path);
  resolve(handle, "llg_matcher_is_accepting", api.matcher_is_accepting, path);
  resolve(handle, "llg_get_version", api.get_version, path);
  g_api = api;
  g_path = path;
  g_loaded = &g_api;
  return g_api;
}
}  // namespace

const Api& Api::load(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return load_locked(path);
}

void Api::defer(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded == nullptr) g_deferred_path = path;
}

const Api* Api::loaded() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded == nullptr && !g_deferred_path.empty()) {
    const std::string path = std::move(g_deferred_path);
    g_deferred_path.clear();
    try {
      load_locked(path);
    } catch (const std::exception&) {
      // Stays nullptr: a constrained request then fails with the "needs llguidance" error.
    }
  }
  return g_loaded;
}

}  // namespace ls::llg
