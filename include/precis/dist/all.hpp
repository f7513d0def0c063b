// precis::dist: data-parallel training over MPI (communicator and collectives, DataParallel).
// Needs <mpi.h> and MPI::MPI_CXX; see docs/distributed.md.
#pragma once

#include "precis/dist/data_parallel.hpp"
#include "precis/dist/mpi.hpp"
