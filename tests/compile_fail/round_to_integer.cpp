// Integers are not floating formats.
#include <precis/precis.hpp>
int main() { return precis::round_to<int>(1.5); }
