#include "text/utf8.h"

namespace k3::utf8 {

size_t scan(std::string_view s, size_t i, Scan& result) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    result = Scan::kValid;
    return 1;
  }
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    result = Scan::kInvalid;
    return 1;
  }
  size_t len = 1;
  for (size_t k = 0; k < need; ++k) {
    if (i + len >= s.size()) {
      result = Scan::kTruncated;
      return len;
    }
    const unsigned char b = byte(i + len);
    const bool ok = k == 0 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      result = Scan::kInvalid;
      return len;
    }
    ++len;
  }
  result = Scan::kValid;
  return len;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= s.size()) {
      bool ascii = true;
      for (size_t k = 0; k < 8; ++k) ascii &= static_cast<unsigned char>(s[i + k]) < 0x80;
      if (!ascii) break;
      i += 8;
    }
    if (i >= s.size()) break;
    Scan r;
    const size_t n = scan(s, i, r);
    if (r != Scan::kValid) return false;
    i += n;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    Scan r;
    const size_t n = scan(s, i, r);
    if (r == Scan::kValid) {
      out.append(s.substr(i, n));
    } else {
      out.append(kReplacement);
    }
    i += n;
  }
  return out;
}

size_t truncated_tail(std::string_view s) {
  // A truncated sequence is at most 3 bytes long, so it starts in the last 3 bytes.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t start = from; start < s.size(); ++start) {
    const unsigned char b = static_cast<unsigned char>(s[start]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation bytes cannot start a sequence
    Scan r;
    const size_t n = scan(s, start, r);
    if (r == Scan::kTruncated && start + n == s.size()) return n;
  }
  return 0;
}

char32_t next(std::string_view s, size_t& i) {
  const unsigned char b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  Scan r;
  const size_t n = scan(s, i, r);
  if (r != Scan::kValid) {
    i += n;
    return 0xFFFD;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

bool is_python_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  if (cp < 0x85) return false;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_blank(std::string_view s) {
  size_t i = 0;
  while (i < s.size())
    if (!is_python_space(next(s, i))) return false;
  return true;
}

}  // namespace k3::utf8
