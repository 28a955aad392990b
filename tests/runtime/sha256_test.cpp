// The runtime's SHA-256 (checkpoint fingerprints) against FIPS 180-2's test
// vectors and against LLVM's implementation on random data split at random
// points.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "emit/emit.hpp"
#include "runtime/sha256.hpp"

namespace {

TEST(Sha256, MatchesTheStandardsTestVectors) {
  EXPECT_EQ(gc::rt::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(gc::rt::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(gc::rt::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(gc::rt::sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, ChunkedUpdatesMatchLlvmOnRandomData) {
  std::mt19937 rng(11);
  for (std::size_t size : {1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 1000u, 4097u}) {
    std::string data(size, '\0');
    for (char& c : data) c = char(rng());
    gc::rt::Sha256 h;
    std::size_t pos = 0;
    while (pos < size) {
      const std::size_t take = std::min<std::size_t>(size - pos, 1 + rng() % 70);
      h.update(data.data() + pos, take);
      pos += take;
    }
    EXPECT_EQ(h.hex_digest(), gc::sha256_hex(data)) << "size " << size;
  }
}

}  // namespace
