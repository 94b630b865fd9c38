#include "server/web_assets.h"

namespace k3::server {
namespace {

#include "k3_web_assets.inc"  // kIndexHtml, kAppJs, kStyleCss, kFaviconSvg: unsigned char arrays

std::string_view view(const unsigned char* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace

const WebAsset* find_web_asset(std::string_view path) {
  static const WebAsset assets[] = {
      {"/", "text/html; charset=utf-8", view(kIndexHtml, sizeof kIndexHtml)},
      {"/index.html", "text/html; charset=utf-8", view(kIndexHtml, sizeof kIndexHtml)},
      {"/app.js", "text/javascript; charset=utf-8", view(kAppJs, sizeof kAppJs)},
      {"/style.css", "text/css; charset=utf-8", view(kStyleCss, sizeof kStyleCss)},
      {"/favicon.svg", "image/svg+xml", view(kFaviconSvg, sizeof kFaviconSvg)},
      // For clients that ask for /favicon.ico without reading the page's <link rel=icon>; browsers
      // take an SVG there too.
      {"/favicon.ico", "image/svg+xml", view(kFaviconSvg, sizeof kFaviconSvg)},
  };
  for (const WebAsset& a : assets)
    if (a.path == path) return &a;
  return nullptr;
}

}  // namespace k3::server
