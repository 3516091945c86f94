#include "engine/prefix_tree.h"

#include <algorithm>
#include <cstring>

namespace ls {

constexpr int32_t P = kKvPagePositions;

namespace {
// The least recently used live node for which ok(node) holds, or -1.
template <class Nodes, class Ok>
int32_t least_recent(const Nodes& nodes, Ok ok) {
  int32_t best = -1;
  for (int32_t i = 0; i < int32_t(nodes.size()); ++i)
    if (nodes[size_t(i)].live && ok(nodes[size_t(i)]) &&
        (best < 0 || nodes[size_t(i)].last_used < nodes[size_t(best)].last_used))
      best = i;
  return best;
}
}  // namespace

int32_t PrefixTree::new_node() {
  int32_t i;
  if (!free_nodes_.empty()) {
    i = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    i = int32_t(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[size_t(i)];
  n.parent = n.page = n.wpage = -1;
  n.n_key = 0;
  n.children.clear();
  n.live = true;
  return i;
}

int32_t PrefixTree::root(const LoraSet& lora, bool create) {
  for (const auto& [set, node] : roots_)
    if (set.same_as(lora)) return node;
  if (!create) return -1;
  const int32_t r = new_node();
  roots_.emplace_back(lora, r);
  return r;
}

int32_t PrefixTree::child(int32_t node, const int32_t* key) const {
  for (int32_t c : nodes_[size_t(node)].children)
    if (nodes_[size_t(c)].n_key == P && std::memcmp(nodes_[size_t(c)].key, key, sizeof(int32_t) * P) == 0) return c;
  return -1;
}

int32_t PrefixTree::match(const int32_t* key, int32_t n, const LoraSet& lora, int32_t* pages, int32_t* partial_page,
                          int32_t* partial_len, int32_t* wpages, int32_t* partial_wpage) {
  *partial_page = -1;
  *partial_len = 0;
  if (partial_wpage) *partial_wpage = -1;
  int32_t node = root(lora, false);
  if (node < 0) return 0;
  const uint64_t now = ++clock_;
  int32_t n_full = 0;
  for (; (n_full + 1) * P <= n; ++n_full) {
    const int32_t c = child(node, key + int64_t(n_full) * P);
    if (c < 0) break;
    node = c;
    nodes_[size_t(node)].last_used = now;
    pages[n_full] = nodes_[size_t(node)].page;
    if (wpages) wpages[n_full] = nodes_[size_t(node)].wpage;
  }
  const int32_t* rest = key + int64_t(n_full) * P;
  const int32_t rest_n = std::min(P, n - n_full * P);
  for (int32_t c : nodes_[size_t(node)].children) {
    int32_t k = 0;
    const int32_t k_max = std::min(rest_n, nodes_[size_t(c)].n_key);
    while (k < k_max && nodes_[size_t(c)].key[k] == rest[k]) ++k;
    if (k > *partial_len && k < P) {
      *partial_len = k;
      *partial_page = nodes_[size_t(c)].page;
      if (partial_wpage) *partial_wpage = nodes_[size_t(c)].wpage;
    }
  }
  return n_full;
}

int32_t PrefixTree::insert(const int32_t* key, int32_t n, int32_t* pages, const LoraSet& lora, bool tail,
                           int32_t* wpages) {
  if (!wpool_) wpages = nullptr;
  const int32_t n_full = n / P, n_tail = tail ? n % P : 0;
  if (n_full + n_tail == 0) return 0;
  int32_t node = root(lora, true);
  const uint64_t now = ++clock_;
  int32_t added = 0;
  // Node c takes the caller's window page j, or the caller switches to the node's.
  auto share_window = [&](int32_t c, int32_t j) {
    if (!wpages || wpages[j] < 0) return;
    int32_t& held = nodes_[size_t(c)].wpage;
    if (held < 0) {
      held = wpages[j];
      wpool_->ref(held);
    } else if (held != wpages[j]) {
      wpool_->ref(held);
      wpool_->unref(wpages[j]);
      wpages[j] = held;
    }
  };
  auto add_child = [&](const int32_t* k, int32_t n_key, int32_t page) {
    const int32_t c = new_node();  // may grow nodes_: no Node& is held across it
    Node& nd = nodes_[size_t(c)];
    nd.parent = node;
    nd.page = page;
    nd.n_key = n_key;
    std::memcpy(nd.key, k, sizeof(int32_t) * size_t(n_key));
    pool_->ref(page);
    nodes_[size_t(node)].children.push_back(c);
    ++added;
    return c;
  };
  for (int32_t j = 0; j < n_full; ++j) {
    const int32_t* kj = key + int64_t(j) * P;
    int32_t c = child(node, kj);
    if (c >= 0) {
      const int32_t cached = nodes_[size_t(c)].page;
      if (cached != pages[j]) {  // computed twice: keep the cached copy, free ours (when no one else maps it)
        pool_->ref(cached);
        pool_->unref(pages[j]);
        pages[j] = cached;
      }
    } else {
      c = add_child(kj, P, pages[j]);
    }
    share_window(c, j);
    nodes_[size_t(c)].last_used = now;
    node = c;
  }
  if (n_tail > 0) {
    const int32_t* kt = key + int64_t(n_full) * P;
    bool covered = false;  // a child starting with these ids already serves every match this one would
    for (int32_t c : nodes_[size_t(node)].children) {
      const Node& nd = nodes_[size_t(c)];
      if (nd.n_key >= n_tail && std::memcmp(nd.key, kt, sizeof(int32_t) * size_t(n_tail)) == 0) covered = true;
    }
    if (!covered) {
      const int32_t c = add_child(kt, n_tail, pages[n_full]);
      share_window(c, n_full);
      nodes_[size_t(c)].last_used = now;
    }
  }
  num_cached_ += added;
  stores_ += uint64_t(added);
  return added;
}

int32_t PrefixTree::evictable(uint64_t before) const {
  int32_t n = 0;
  for (const Node& nd : nodes_) n += nd.live && nd.page >= 0 && nd.last_used < before && pool_->refs(nd.page) == 1;
  return n;
}

bool PrefixTree::evict_one(uint64_t before) {
  const int32_t best = least_recent(nodes_, [&](const Node& n) {
    return n.page >= 0 && n.children.empty() && n.last_used < before && pool_->refs(n.page) == 1;
  });
  if (best < 0) return false;
  Node& nd = nodes_[size_t(best)];
  auto& siblings = nodes_[size_t(nd.parent)].children;
  siblings.erase(std::find(siblings.begin(), siblings.end(), best));
  pool_->unref(nd.page);
  if (nd.wpage >= 0) wpool_->unref(nd.wpage);
  nd.wpage = -1;
  nd.live = false;
  nd.children.clear();
  free_nodes_.push_back(best);
  --num_cached_;
  ++evictions_;
  return true;
}

int32_t PrefixTree::window_evictable(uint64_t before) const {
  int32_t n = 0;
  for (const Node& nd : nodes_) n += nd.live && nd.wpage >= 0 && nd.last_used < before && wpool_->refs(nd.wpage) == 1;
  return n;
}

bool PrefixTree::evict_window_one(uint64_t before) {
  const int32_t best = least_recent(
      nodes_, [&](const Node& n) { return n.wpage >= 0 && n.last_used < before && wpool_->refs(n.wpage) == 1; });
  if (best < 0) return false;
  wpool_->unref(nodes_[size_t(best)].wpage);
  nodes_[size_t(best)].wpage = -1;
  ++evictions_;
  return true;
}

}  // namespace ls
