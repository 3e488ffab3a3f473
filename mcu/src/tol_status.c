/* tol_status.c - names of the status codes, generated from TOL_STATUS_LIST. */
#include "tol_status.h"

const char *tol_status_name(tol_status_t s)
{
#define TOL_STATUS_CASE_(name, value, desc) \
    case name:                              \
        return #name;
    switch (s) {
        TOL_STATUS_LIST(TOL_STATUS_CASE_)
    default:
        break;
    }
#undef TOL_STATUS_CASE_
    return "?";
}
