/* SPDX-License-Identifier: Apache-2.0 */
// A small open-addressing hash map from uint64_t keys to trivially copyable
// values, for the event consumer's hot path (one insert or erase per event).
// Linear probing with backward-shift deletion: no tombstones, so long-running
// churn does not degrade lookups. Every key is allowed (key 0 is kept apart).
// Thread-safety: none; owned by the consumer thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace lw {

template <typename V>
class FlatMap {
  static_assert(std::is_trivially_copyable_v<V>);

 public:
  FlatMap() { rehash(16); }

  size_t size() const { return size_ + (has_zero_ ? 1 : 0); }
  bool empty() const { return size() == 0; }

  V* find(uint64_t key) {
    if (key == 0) return has_zero_ ? &zero_value_ : nullptr;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == 0) return nullptr;
    }
  }
  const V* find(uint64_t key) const { return const_cast<FlatMap*>(this)->find(key); }

  // Inserts or overwrites. Returns the stored value and whether it was new.
  std::pair<V*, bool> insert(uint64_t key, const V& value) {
    if (key == 0) {
      bool inserted = !has_zero_;
      has_zero_ = true;
      zero_value_ = value;
      return {&zero_value_, inserted};
    }
    if ((size_ + 1) * 4 > keys_.size() * 3) rehash(keys_.size() * 2);
    size_t i = slot(key);
    for (; keys_[i] != 0; i = (i + 1) & mask_) {
      if (keys_[i] == key) {
        values_[i] = value;
        return {&values_[i], false};
      }
    }
    keys_[i] = key;
    values_[i] = value;
    ++size_;
    return {&values_[i], true};
  }

  bool erase(uint64_t key) {
    if (key == 0) {
      bool had = has_zero_;
      has_zero_ = false;
      return had;
    }
    size_t i = slot(key);
    for (; keys_[i] != key; i = (i + 1) & mask_) {
      if (keys_[i] == 0) return false;
    }
    // Backward-shift: move later members of the probe run into the hole.
    for (size_t j = (i + 1) & mask_; keys_[j] != 0; j = (j + 1) & mask_) {
      size_t home = slot(keys_[j]);
      // Can keys_[j] move to i? Only if its home is not within (i, j].
      bool in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
      if (!in_range) {
        keys_[i] = keys_[j];
        values_[i] = values_[j];
        i = j;
      }
    }
    keys_[i] = 0;
    --size_;
    if (keys_.size() > 64 && size_ * 8 < keys_.size()) rehash(keys_.size() / 2);
    return true;
  }

  void clear() {
    has_zero_ = false;
    // Not rehash(16): that re-inserts every old key, and clear() would
    // keep them all (a HeapTracker cleared at exec kept records pointing
    // at sites it had dropped, and the analyzer indexed past its vector).
    // Fresh vectors, not assign(): assign keeps the old capacity, and a
    // cleared map must give its memory back (the daemon's memory bound).
    std::vector<uint64_t>(16, 0).swap(keys_);
    std::vector<V>(16, V{}).swap(values_);
    mask_ = 15;
    size_ = 0;
  }

  template <typename F>
  void for_each(F&& fn) const {
    if (has_zero_) fn(uint64_t{0}, zero_value_);
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != 0) fn(keys_[i], values_[i]);
  }

  // The same with each value writable (the keys are not).
  template <typename F>
  void for_each_value(F&& fn) {
    if (has_zero_) fn(uint64_t{0}, zero_value_);
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != 0) fn(keys_[i], values_[i]);
  }

  size_t memory_bytes() const { return keys_.capacity() * (sizeof(uint64_t) + sizeof(V)); }

 private:
  size_t slot(uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key) & mask_;
  }

  void rehash(size_t capacity) {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<V> old_values = std::move(values_);
    keys_.assign(capacity, 0);
    values_.assign(capacity, V{});
    mask_ = capacity - 1;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != 0) insert(old_keys[i], old_values[i]);
  }

  std::vector<uint64_t> keys_;
  std::vector<V> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
  bool has_zero_ = false;
  V zero_value_{};
};

}  // namespace lw
