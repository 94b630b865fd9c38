// Closes the region opened by isa_begin.h: what follows is compiled for the baseline target again.
#pragma GCC pop_options
#undef K3_ISA_NS
