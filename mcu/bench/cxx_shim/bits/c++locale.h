/* Bench-only configuration shim (tinyol): the declarations of a "C"-only
 * locale model that libstdc++'s headers refer to; nothing here is called. */
#ifndef _GLIBCXX_CXX_LOCALE_H
#define _GLIBCXX_CXX_LOCALE_H 1
#pragma GCC system_header
#include <clocale>
#define _GLIBCXX_NUM_CATEGORIES 0
namespace std _GLIBCXX_VISIBILITY(default)
{
_GLIBCXX_BEGIN_NAMESPACE_VERSION
  typedef int* __c_locale;
  int __convert_from_v(const __c_locale&, char*, const int, const char*, ...);
_GLIBCXX_END_NAMESPACE_VERSION
}
#endif
