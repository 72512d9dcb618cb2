#include <cstdio>

int main(int argc, char** argv) {
  std::fprintf(stderr, "ferry: not yet\n");
  return 1;
}
