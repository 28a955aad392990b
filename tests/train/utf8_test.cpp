// The greedy sample prints whole UTF-8 characters (templates/train/utf8.hpp).
#include "train/utf8.hpp"

#include <gtest/gtest.h>

namespace {

using gc::tree::whole_utf8_chars;

TEST(Utf8, WellFormedTextIsUnchanged) {
  const std::string text = "plain ascii, caf\xC3\xA9, \xE2\x96\x81, \xF0\x9F\x98\x80";
  EXPECT_EQ(whole_utf8_chars(text), text);
  EXPECT_EQ(whole_utf8_chars(""), "");
}

TEST(Utf8, CharactersCutByTheWindowAreDropped) {
  const std::string smile = "\xF0\x9F\x98\x80";  // U+1F600, four bytes
  for (std::size_t cut = 1; cut < 4; ++cut) {
    EXPECT_EQ(whole_utf8_chars("ok " + smile.substr(0, cut)), "ok ") << cut;  // end cut
    EXPECT_EQ(whole_utf8_chars(smile.substr(cut) + " ok"), " ok") << cut;     // start cut
  }
  EXPECT_EQ(whole_utf8_chars("caf\xC3"), "caf");
}

TEST(Utf8, MalformedBytesInsideBecomeReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(whole_utf8_chars("a\xFF" "b"), "a" + fffd + "b");
  EXPECT_EQ(whole_utf8_chars("a\xC0\xAF" "b"), "a" + fffd + fffd + "b");       // overlong '/'
  EXPECT_EQ(whole_utf8_chars("a\xED\xA0\x80" "b"), "a" + fffd + fffd + fffd + "b");  // a surrogate
  EXPECT_EQ(whole_utf8_chars("a\xE2\x96" "b"), "a" + fffd + fffd + "b");        // lead byte then ASCII
  EXPECT_EQ(whole_utf8_chars("a\x80" "b"), "a" + fffd + "b");                   // stray continuation inside
}

}  // namespace
