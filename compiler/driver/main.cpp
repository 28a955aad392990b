#include <iostream>
#include "spec/spec.hpp"
int main(int argc, char** argv) {
  gc::Diagnostics d;
  auto s = gc::load_spec(argv[1], d);
  d.print(std::cerr);
  if (s) std::cout << gc::resolved_toml(*s);
  return s ? 0 : 1;
}
