// TensorBoard event files, written directly (no protobuf library): every
// metrics.jsonl record becomes scalars (and cosine heatmaps images) in
// RUN/tb/events.out.tfevents.*, readable by tensorboard and its
// EventAccumulator while the run is still going.
//
// File format (TensorFlow's TFRecord): each record is
//   uint64 length (LE) | uint32 masked CRC-32C of the length | bytes | uint32 masked CRC-32C of the bytes
// with masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, and each record's
// bytes an `Event` protobuf: wall_time (1, double), step (2, int64),
// file_version (3, string, first record "brain.Event:2") or summary (5):
// `Summary` { repeated Value value = 1 }, Value { tag = 1, simple_value = 2
// (float), image = 4 }, Image { height = 1, width = 2, colorspace = 3,
// encoded_image_string = 4 (PNG) }.
//
// Tags (docs/metrics.md "TensorBoard"): the record's "metric" (or "event")
// name, then the path to each number inside it, with the keys "value" and
// "values" left out: {"step":5,"loss":2.1} -> "loss"; {"metric":"sink_score",
// "values":{"0":0.3}} -> "sink_score/0"; {"metric":"stable_rank","sigma_max":
// {"W":2}} -> "stable_rank/sigma_max/W". Strings, booleans and nulls are skipped.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gc::rt {

// CRC-32C (Castagnoli), as TFRecord uses it, and its masked form.
std::uint32_t crc32c(const void* data, std::size_t n);
std::uint32_t masked_crc32c(const void* data, std::size_t n);

// One TFRecord framing `payload`.
std::string tfrecord(const std::string& payload);

// The scalars of one metrics record, by tag, in the record's key order.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record);

// Event payloads.
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
std::string event_image(double wall_time, std::int64_t step, const std::string& tag, int width, int height,
                        const std::string& png);

// RUN/tb/events.out.tfevents.*: a fresh directory holding one event file that
// first mirrors `earlier` (the records already in metrics.jsonl, on resume),
// then receives each record write() is given. Every record is one write(2):
// a killed run leaves at most a truncated last record, which readers skip.
class TensorBoardWriter {
 public:
  TensorBoardWriter(const std::string& run_dir, const std::vector<nlohmann::json>& earlier);
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string event_bytes(const nlohmann::json& record) const;

  std::string run_dir_, path_;
  int fd_ = -1;
};

}  // namespace gc::rt
