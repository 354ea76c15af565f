// The paged KV pool's bookkeeping: page allocation and release, prefix publishing and lookup,
// least-recently-used eviction of cached prefix pages, copy-on-write of shared pages.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"

namespace dllm {
namespace {

TEST(KvPool, PagesAreAllocatedAndReturned) {
  KvPool pool(4, 16);
  EXPECT_EQ(pool.available_pages(), 4);
  {
    KvCache a(pool), b(pool);
    a.reserve(17);  // two pages
    b.reserve(16);
    EXPECT_EQ(a.capacity(), 32);
    EXPECT_EQ(pool.used_pages(), 3);
    EXPECT_EQ(a.pages_for(64), 2);
    EXPECT_THROW(a.reserve(64), Error) << "only one page is left";
    EXPECT_EQ(a.capacity(), 32) << "a failed reserve changes nothing";
    EXPECT_NE(a.physical_slot(16) / 16, a.physical_slot(0) / 16);
  }
  EXPECT_EQ(pool.used_pages(), 0) << "destroyed caches give their pages back";
}

TEST(KvPool, RejectsBadSizes) {
  EXPECT_THROW(KvPool(0, 16), Error);
  EXPECT_THROW(KvPool(4, 12), Error);  // not a power of two
  EXPECT_THROW(KvPool(int64_t{1} << 30, 16), Error);  // more slots than 32-bit indices reach
}

TEST(KvPool, PublishedPagesAreSharedAndCachedUntilEvicted) {
  KvPool pool(3, 4);
  KvCache a(pool);
  a.reserve(8);
  pool.publish(a.pages()[0], 111);
  pool.publish(a.pages()[1], 222);
  const int32_t first = a.pages()[0];
  a.clear();
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_EQ(pool.cached_pages(), 2) << "published pages stay cached";
  EXPECT_EQ(pool.available_pages(), 3);

  const auto hit = pool.lookup(111);
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, first);
  EXPECT_EQ(pool.used_pages(), 1);
  EXPECT_FALSE(pool.lookup(333));
  EXPECT_EQ(pool.prefix_hits(), 1);
  EXPECT_EQ(pool.prefix_lookups(), 2);

  // Fresh pages: the free one first, then the least recently used cached page (hash 222).
  auto p1 = pool.allocate(), p2 = pool.allocate();
  ASSERT_TRUE(p1 && p2);
  EXPECT_FALSE(pool.lookup(222)) << "evicted";
  EXPECT_FALSE(pool.allocate()) << "exhausted";
  pool.release(*hit);
  pool.release(*p1);
  pool.release(*p2);
  EXPECT_EQ(pool.used_pages(), 0);
}

TEST(KvPool, WritesIntoSharedPagesCopyFirst) {
  KvPool pool(4, 4);
  KvCache owner(pool);
  owner.reserve(8);
  owner.set_length(8);
  pool.publish(owner.pages()[0], 7);
  KvCache reader(pool);
  const auto page = pool.lookup(7);
  ASSERT_TRUE(page);
  reader.adopt_prefix(std::vector<int32_t>{*page});
  EXPECT_EQ(reader.length(), 4);
  EXPECT_EQ(reader.positions()[3], 3);
  EXPECT_EQ(pool.references(*page), 2);

  const std::vector<int32_t> slots = {2, 5};
  EXPECT_EQ(reader.copy_pages_for(slots), 1);
  reader.reserve(8);
  const auto copies = reader.prepare_writes(slots);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, *page);
  EXPECT_NE(reader.pages()[0], *page) << "the reader writes its own copy";
  EXPECT_EQ(owner.pages()[0], *page);
  EXPECT_EQ(pool.references(*page), 1);
  EXPECT_TRUE(pool.published(*page));

  // The sole owner writing its published page withdraws it from the prefix cache.
  EXPECT_TRUE(owner.prepare_writes(std::vector<int32_t>{1}).empty());
  EXPECT_FALSE(pool.published(*page));
}

}  // namespace
}  // namespace dllm
