# tdaot-rehearse: a package with a contract in MuJoCo (cpp/tools/tdaot_rehearse), included by the
# top-level CMakeLists.txt. MuJoCo's C library and headers come from the Python environment's
# mujoco-core wheel (mujoco/include/mujoco/*.h, mujoco/libmujoco.so.X.Y.Z), found through
# Python_EXECUTABLE without importing it; TDAOT_MUJOCO_DIR (the wheel's mujoco/ folder) overrides.
# Optional: without it the tools are not built.
#   tdaot-rehearse        the loop on tdaot::lite and MuJoCo (no libtorch)
#   tdaot-rehearse-torch  the same loop on tdaot::runtime (tdaot-rehearse --runtime torch runs it)
set(TDAOT_MUJOCO_DIR "" CACHE PATH "the mujoco-core wheel's mujoco/ folder (empty: the venv's)")
set(_tdaot_mujoco_dir "${TDAOT_MUJOCO_DIR}")
if(NOT _tdaot_mujoco_dir)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
            "import importlib.util as u; s = u.find_spec('mujoco'); print(s.submodule_search_locations[0] if s else '')"
    OUTPUT_VARIABLE _tdaot_mujoco_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
set(_tdaot_mujoco_lib "")
if(_tdaot_mujoco_dir AND EXISTS "${_tdaot_mujoco_dir}/include/mujoco/mujoco.h")
  file(GLOB _tdaot_mujoco_libs "${_tdaot_mujoco_dir}/libmujoco.so.*")
  list(SORT _tdaot_mujoco_libs)
  list(LENGTH _tdaot_mujoco_libs _tdaot_mujoco_count)
  if(_tdaot_mujoco_count GREATER 0)
    list(GET _tdaot_mujoco_libs -1 _tdaot_mujoco_lib)
  endif()
endif()
if(NOT _tdaot_mujoco_lib)
  message(STATUS "tdaot: no MuJoCo (pip install mujoco-core==4.0.0, or set TDAOT_MUJOCO_DIR): "
                 "tdaot-rehearse is not built")
  return()
endif()
if(NOT TARGET tdaot::mujoco)
  add_library(tdaot::mujoco SHARED IMPORTED)
  set_target_properties(tdaot::mujoco PROPERTIES
    IMPORTED_LOCATION "${_tdaot_mujoco_lib}"
    INTERFACE_INCLUDE_DIRECTORIES "${_tdaot_mujoco_dir}/include")
endif()
message(STATUS "tdaot: MuJoCo ${_tdaot_mujoco_lib}: building tdaot-rehearse and tdaot-rehearse-torch")
set(_rehearse "${PROJECT_SOURCE_DIR}/cpp/tools/tdaot_rehearse")
# The loop, the MuJoCo adapter, the trajectory and the command line: no runtime; each executable
# adds its runner (runner.h).
add_library(tdaot_rehearse_loop OBJECT
  ${_rehearse}/main.cpp
  ${_rehearse}/rehearsal.cpp
  ${_rehearse}/mujoco_robot.cpp
  ${_rehearse}/trajectory.cpp
  ${_rehearse}/summary.cpp)
target_include_directories(tdaot_rehearse_loop PRIVATE ${PROJECT_SOURCE_DIR}/cpp/include ${PROJECT_SOURCE_DIR}/cpp/tools)
target_link_libraries(tdaot_rehearse_loop PUBLIC tdaot::mujoco CLI11::CLI11)
add_executable(tdaot-rehearse ${_rehearse}/lite_runner.cpp)
add_executable(tdaot-rehearse-torch ${_rehearse}/torch_runner.cpp)
target_link_libraries(tdaot-rehearse PRIVATE tdaot_rehearse_loop tdaot::lite)
target_link_libraries(tdaot-rehearse-torch PRIVATE tdaot_rehearse_loop tdaot::runtime)
foreach(_tool tdaot-rehearse tdaot-rehearse-torch)
  target_include_directories(${_tool} PRIVATE ${PROJECT_SOURCE_DIR}/cpp/tools)
endforeach()
# The build tree's RPATH holds MuJoCo's folder (CMake adds an imported library's); installed,
# tdaot::lite beside it, MuJoCo where the wheel is, and Torch's libraries for the torch tool.
# In the wheel (tdaot/_cpp/bin, beside tdaot-run), MuJoCo and Torch are first looked for in the
# site-packages holding tdaot (mujoco/, torch/lib), then where the build found them.
if(_tdaot_under_skbuild)
  set(_site "$ORIGIN/../../..")
  set_target_properties(tdaot-rehearse PROPERTIES
    INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};${_site}/mujoco;${_tdaot_mujoco_dir}")
  set_target_properties(tdaot-rehearse-torch PROPERTIES
    INSTALL_RPATH "${_site}/mujoco;${_site}/torch/lib;${_tdaot_mujoco_dir};${TORCH_INSTALL_PREFIX}/lib")
else()
  set_target_properties(tdaot-rehearse PROPERTIES
    INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};${_tdaot_mujoco_dir}")
  set_target_properties(tdaot-rehearse-torch PROPERTIES
    INSTALL_RPATH "${_tdaot_mujoco_dir};${TORCH_INSTALL_PREFIX}/lib")
endif()
install(TARGETS tdaot-rehearse tdaot-rehearse-torch
        RUNTIME DESTINATION "${TDAOT_INSTALL_PREFIX}${CMAKE_INSTALL_BINDIR}")
list(APPEND _tdaot_targets tdaot_rehearse_loop tdaot-rehearse tdaot-rehearse-torch)
