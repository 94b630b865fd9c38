// Closes the region opened by isa_begin.h: what follows is compiled for the baseline target again.
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef K3_ISA_NS
