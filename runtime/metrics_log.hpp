// The metrics log: JSON Lines, one object per event, appended and flushed
// (one write(2) per line) as training runs. Numbers are written with the
// shortest text that round-trips. JSON has no NaN or Inf, so a non-finite
// number is written as null and listed in a "nonfinite" object that maps its
// JSON pointer to "nan", "inf" or "-inf":
//
//   {"step":7,"loss":null,"nonfinite":{"/loss":"nan"}}
//
// read_metrics_log() puts the non-finite values back.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/tensorboard.hpp"

namespace gc::rt {

class MetricsWriter {
 public:
  enum class Mode {
    Truncate,  // a fresh run: start an empty log
    Append,    // a resumed run: continue the log (which must end with a complete line)
  };
  // With `tensorboard`, every record also goes to a TensorBoard event file in
  // the log's directory (tb/; runtime/tensorboard.hpp), which first mirrors
  // the records the log already holds (a resumed run).
  MetricsWriter(const std::string& path, Mode mode, bool tensorboard = false);
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();

  // Appends one object as one line. Throws RuntimeError for a non-object.
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// One line's text for `record` (without the newline): non-finite numbers
// replaced by null and listed under "nonfinite".
std::string metrics_line(const nlohmann::json& record);

// Reads every record, restoring non-finite values and removing "nonfinite".
// Errors name the file, line and byte offset of a bad or incomplete line.
std::vector<nlohmann::json> read_metrics_log(const std::string& path);

// For resuming from the checkpoint at `max_step`: atomically rewrites the log
// keeping the records whose "step" is absent or <= max_step, and dropping a torn
// last line (one without its newline) left by a crash. A missing log is fine.
// Returns the number of lines dropped. A complete line that is not a JSON
// object is an error (never silently deleted).
std::size_t truncate_metrics_log(const std::string& path, std::int64_t max_step);

}  // namespace gc::rt
