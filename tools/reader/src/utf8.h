// UTF-8 checks for strings that are bytes (file names, comms, symbols)
// written where UTF-8 is required (JSON, profile.proto).
#ifndef MMAP3_READER_UTF8_H_
#define MMAP3_READER_UTF8_H_

#include <cstddef>
#include <string>

namespace mmap3 {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0.
size_t Utf8SequenceAt(const std::string& s, size_t i);

// `s` unchanged if it is UTF-8; else each byte that is not part of a UTF-8
// sequence is written \xNN and each backslash \\, so that two strings that
// differ stay different (a replacement character would make them one).
std::string EscapeNonUtf8(const std::string& s);

}  // namespace mmap3

#endif  // MMAP3_READER_UTF8_H_
