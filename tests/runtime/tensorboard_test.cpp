// The TensorBoard event-file writer's pieces: CRC-32C and its mask, TFRecord
// framing, protobuf encoding of a scalar event, and the tag rule.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/tensorboard.hpp"

namespace {

using gc::rt::crc32c;
using nlohmann::json;

TEST(TensorBoardFormat, Crc32cMatchesTheStandardCheckValue) {
  // RFC 3720 (iSCSI) B.4 and the usual "123456789" check value of CRC-32C.
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  const std::uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(gc::rt::masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoardFormat, RecordFramesThePayloadWithLengthAndChecksums) {
  const std::string payload = "abc";
  const std::string r = gc::rt::tfrecord(payload);
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  std::uint64_t length = 0;
  std::memcpy(&length, r.data(), 8);
  EXPECT_EQ(length, 3u);
  std::uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 15, 4);
  EXPECT_EQ(length_crc, gc::rt::masked_crc32c(r.data(), 8));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(data_crc, gc::rt::masked_crc32c("abc", 3));
}

TEST(TensorBoardFormat, ScalarEventIsTheProtobufTensorBoardExpects) {
  const std::string e = gc::rt::event_scalars(0.0, 300, {{"loss", 2.0}});
  // wall_time: field 1, fixed64; step: field 2, varint 300 = ac 02; summary: field 5.
  const std::string expected = std::string("\x09", 1) + std::string(8, '\0') + "\x10\xac\x02" + "\x2a\x0d" +
                               "\x0a\x0b" + "\x0a\x04loss" + "\x15" + std::string("\x00\x00\x00\x40", 4);
  EXPECT_EQ(e, expected);
}

TEST(TensorBoardFormat, TagsFollowTheMetricNameAndPathWithoutValueKeys) {
  const auto train = gc::rt::tensorboard_scalars(json::parse(R"({"step":5,"loss":2.5,"lr":0.1})"));
  ASSERT_EQ(train.size(), 2u);
  EXPECT_EQ(train[0].first, "loss");
  EXPECT_EQ(train[1].first, "lr");
  const auto sink = gc::rt::tensorboard_scalars(
      json::parse(R"({"metric":"sink_score","step":0,"values":{"0":0.25,"1":0.5}})"));
  ASSERT_EQ(sink.size(), 2u);
  EXPECT_EQ(sink[1].first, "sink_score/1");
  EXPECT_EQ(sink[1].second, 0.5);
  const auto flow = gc::rt::tensorboard_scalars(json::parse(R"({"metric":"residual_flow","step":3,"value":0.7})"));
  ASSERT_EQ(flow.size(), 1u);
  EXPECT_EQ(flow[0].first, "residual_flow");
  const auto nested = gc::rt::tensorboard_scalars(json::parse(
      R"({"metric":"moe_routing","step":1,"load":{"1":[3,4]},"note":"x","flag":true,"gone":null})"));
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].first, "moe_routing/load/1/0");
  EXPECT_EQ(nested[1].second, 4.0);
  const auto summary = gc::rt::tensorboard_scalars(json::parse(R"({"event":"summary","step":9,"tokens_per_s":100})"));
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].first, "summary/tokens_per_s");
}

}  // namespace
