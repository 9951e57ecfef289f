# SPDX-License-Identifier: Apache-2.0
# add_bpf_skeleton(NAME SOURCE [HEADERS ...])
#
# Compiles SOURCE (a .bpf.c file) with clang -target bpf into NAME.bpf.o and
# generates NAME.skel.h with `bpftool gen skeleton`. Creates an INTERFACE
# library NAME_skel whose include path holds the skeleton header.
find_program(BPF_CLANG NAMES clang-14 clang REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

# libbpf's usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> lives
# in the multiarch directory (Debian: /usr/include/x86_64-linux-gnu), which
# clang -target bpf does not search by itself.
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(LW_BPF_MULTIARCH_INCLUDE -idirafter /usr/include/${CMAKE_LIBRARY_ARCHITECTURE})
endif()

function(add_bpf_skeleton name source)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/bpf/${name}.bpf.o)
  set(skel ${CMAKE_CURRENT_BINARY_DIR}/bpf/${name}.skel.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/bpf
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror
            -Wno-unused-function
            -I${PROJECT_SOURCE_DIR}/bpf ${LW_BPF_MULTIARCH_INCLUDE}
            -c ${source} -o ${obj}
    DEPENDS ${source} ${ARGN}
    COMMENT "BPF ${name}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name} > ${skel}
    DEPENDS ${obj}
    COMMENT "skeleton ${name}"
    VERBATIM)
  add_custom_target(${name}_skel_gen DEPENDS ${skel})
  add_library(${name}_skel INTERFACE)
  add_dependencies(${name}_skel ${name}_skel_gen)
  target_include_directories(${name}_skel INTERFACE ${CMAKE_CURRENT_BINARY_DIR}/bpf)
endfunction()
