# cmake -DOUT=file.inc -DINPUTS="name=path|name=path" -P embed_web.cmake
# Writes one `const unsigned char name[] = {...};` per input (no terminating NUL).
set(text "// Generated from src/server/web by embed_web.cmake; do not edit.\n")
string(REPLACE "|" ";" inputs "${INPUTS}")
foreach(pair IN LISTS inputs)
  string(FIND "${pair}" "=" eq)
  string(SUBSTRING "${pair}" 0 ${eq} name)
  math(EXPR start "${eq} + 1")
  string(SUBSTRING "${pair}" ${start} -1 path)
  file(READ "${path}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n"
         bytes "${bytes}")
  string(APPEND text "const unsigned char ${name}[] = {\n${bytes}};\n")
endforeach()
file(WRITE "${OUT}.tmp" "${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
