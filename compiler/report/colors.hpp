// Colours for the report: a categorical palette (runs, parameter classes), a
// sequential ramp (layers: dark = shallow, light = deep) and a diverging ramp
// (signed quantities such as Δsym p: blue < 0 < orange-red).
#pragma once

#include <cstdint>
#include <string>

namespace gc::report {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
};

// "#rrggbb"
std::string hex(Rgb c);

// The i-th colour of a 10-colour categorical palette (cycles).
std::string categorical_color(std::size_t i);

// t in [0, 1] (clamped; NaN gives grey): dark purple → blue → teal → green → yellow.
Rgb sequential_rgb(double t);
// For lines on white: the ramp without its lightest end.
std::string sequential_line_color(std::size_t index, std::size_t count);

// t in [-1, 1] (clamped; NaN gives grey): blue → white → red.
Rgb diverging_rgb(double t);

}  // namespace gc::report
