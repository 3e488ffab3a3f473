/* Bench-only configuration shim (tinyol): std::ctype_base over newlib's
 * <ctype.h> class bits (_U upper, _L lower, _N digit, _S space, _P punct,
 * _C control, _X hex, _B blank). Declarations only; nothing here is called. */
#include <ctype.h>

namespace std _GLIBCXX_VISIBILITY(default)
{
_GLIBCXX_BEGIN_NAMESPACE_VERSION
  struct ctype_base
  {
    typedef const int* __to_type;
    typedef char mask;
    static const mask upper = _U;
    static const mask lower = _L;
    static const mask alpha = _U | _L;
    static const mask digit = _N;
    static const mask xdigit = _X | _N;
    static const mask space = _S;
    static const mask print = _P | _U | _L | _N | _B;
    static const mask graph = _P | _U | _L | _N;
    static const mask cntrl = _C;
    static const mask punct = _P;
    static const mask alnum = _U | _L | _N;
    static const mask blank = _B;
  };
_GLIBCXX_END_NAMESPACE_VERSION
}
