// A program with nothing but app/cpu_baseline.cpp's check, built for x86-64-v4: it prints
// "started" only when the check let it through (tests/jobs/cpu_baseline.sh).
#include <cstdio>

int main() {
  std::puts("started");
  return 0;
}
